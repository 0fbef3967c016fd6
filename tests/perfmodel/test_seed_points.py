"""Predictions pinned to the seed benchmark cards' measured operating points.

Tolerance: a calibrated prediction (the model's figure for the recommended command scaled by
the current server's measured/predicted ratio) lands within 30 % of the card's measured
figure; BENCHMARKS.md ("Performance model") lists the error on every seed point. Raw
(uncalibrated) roofline figures are at datasheet peak and are not pinned, only their ratio
to the measurement is: it must sit in the healthy band the calibration trusts.
"""

from __future__ import annotations

import pytest
from seedpoints import POINTS, report, report_pair

from advice.perfmodel import predict_commands
from audit.kb.context import build_context
from audit.kb.perf import calibrate

TOLERANCE = 0.30


def _ctx(name: str, **override):
    r = report({**POINTS[name], **override})
    return build_context(r["servers"][0], r)


def _close(value: float, measured: float) -> bool:
    return abs(value / measured - 1) <= TOLERANCE


def test_tp1_server_predicts_the_tp2_push_point():
    """LIGHT (one H100, measured 141 ms TPOT) calibrates PUSH on two H100s: the card
    measured 78 ms TPOT and 745 tok/s at the same 4K/512 load."""
    out = predict_commands(_ctx("LIGHT 4K/512 c64"), _ctx("PUSH 4K/512"))
    assert out["status"] == "ok" and out["calibration"]["trusted"] is True
    rec = out["recommended"]["calibrated"]
    assert _close(rec["tpot_s"], 0.078), rec
    assert _close(rec["output_tps"], 745), rec
    assert out["buys"].startswith("+") and "TPOT (141 ->" in out["buys"]


def test_tp2_long_context_server_predicts_two_tp1_replicas():
    """PUSH at 16K/1K c=128 (193 ms, 137 s TTFT) calibrates 2 x TP=1: the card measured
    TTFT 200-319 s at TP=1 (2-3x PUSH's) and TPOT 141-201 ms at TP=1 (decision guide)."""
    long_light = _ctx("LIGHT 4K/512 c64", concurrency=128, prompt=16384, output=1024)
    out = predict_commands(_ctx("PUSH 16K/1K c128"), long_light, replicas=2)
    rec = out["recommended"]["calibrated"]
    assert 200 * (1 - TOLERANCE) <= rec["ttft_s"] <= 319 * (1 + TOLERANCE), rec
    assert 0.141 * (1 - TOLERANCE) <= rec["tpot_s"] <= 0.201 * (1 + TOLERANCE), rec
    assert rec["ttft_s"] > out["current"]["calibrated"]["ttft_s"]  # TP=2 keeps TTFT lower


@pytest.mark.parametrize("name", ["LIGHT 4K/512 c64", "PUSH 4K/512", "PUSH 16K/1K c128",
                                  "GB10 31B NVFP4 EAGLE3 c1"])
def test_healthy_seed_points_sit_in_the_trusted_band(name):
    out = predict_commands(_ctx(name), None)
    assert out["current"]["source"].startswith("roofline:")
    lo, hi = calibrate.ROOFLINE_BAND
    assert lo <= out["calibration"]["ratio"] <= hi
    assert out["calibration"]["trusted"] is True


def test_collapsed_server_is_flagged_far_below_its_prediction():
    """GB10 26B-A4B MTP at c=256: the card's collapse (TTFT 13.3 s) is no figure to carry
    over; the server is called out as worth a look instead."""
    out = predict_commands(_ctx("GB10 26B-A4B NVFP4 MTP c256 (collapse)"), None)
    verdict = out["calibration"]
    assert verdict["trusted"] is False
    assert "far slower than the model predicts" in verdict["why"]
    assert verdict["ratios"]["ttft"] > calibrate.ROOFLINE_TTFT_BAND[1]


def test_no_metrics_means_no_prediction_with_the_reason():
    out = predict_commands(_ctx("LIGHT 4K/512 c64") | {"metrics": {}}, None)
    assert out["status"] == "none"
    assert "no observed load" in out["reason"]


def test_uncalibrated_when_the_server_reports_no_latency():
    r = report(POINTS["LIGHT 4K/512 c64"], measured=False)
    ctx = build_context(r["servers"][0], r)
    out = predict_commands(ctx, _ctx("PUSH 4K/512"))
    assert out["status"] == "ok"
    assert out["recommended"]["calibrated"] is None
    assert out["calibration"]["trusted"] is None
    assert "uncalibrated model" in out["buys"]


def test_one_client_keeps_one_replica_busy():
    """2 x TP=1 with a single client: one replica works, the other idles (no doubling)."""
    push = _ctx("PUSH 4K/512", concurrency=1)
    light = _ctx("LIGHT 4K/512 c64", concurrency=1)
    two = predict_commands(push, light, replicas=2)["recommended"]["predicted"]
    one = predict_commands(push, light, replicas=1)["recommended"]["predicted"]
    assert two["output_tps"] == one["output_tps"]
    assert two["tpot_s"] == one["tpot_s"]


def test_gb10_c128_throughput_calibrates_and_c256_is_a_collapse_beyond_it():
    """GB10 26B-A4B MTP: c=128 measured 1380 tok/s (over two scrapes: a rate), c=256
    collapsed to 0.15 tok/s. The model plateaus past max_num_seqs; it does not model the
    scheduler collapse, so the c=256 card lies far outside the c=128-calibrated prediction,
    by more than the trusted band: the disagreement, not a figure, is the answer there."""
    earlier, later = report_pair(POINTS["GB10 26B-A4B NVFP4 MTP c128"])
    ctx = build_context(later["servers"][0], later, [earlier])
    out = predict_commands(ctx, ctx)
    assert out["calibration"]["trusted"] is True
    assert _close(out["current"]["calibrated"]["output_tps"], 1380)
    at_256 = out["curve"]["recommended"]["output_tps"][out["curve"]["concurrency"].index(256)]
    assert at_256 >= out["current"]["calibrated"]["output_tps"] * (1 - TOLERANCE)
    collapsed = POINTS["GB10 26B-A4B NVFP4 MTP c256 (collapse)"]["output_tps"]
    assert at_256 / collapsed > calibrate.ROOFLINE_BAND[1]
