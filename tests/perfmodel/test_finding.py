"""A server far slower than its performance model predicts is a finding (low; medium on a
queueing collapse); a healthy one raises nothing."""

from __future__ import annotations

from seedpoints import POINTS, report

from audit.kb.context import build_context
from audit.kb.engine import load_rules

RULE = "server-far-slower-than-predicted"


def _findings(name: str, **override):
    rep = report({**POINTS[name], **override})
    ctx = build_context(rep["servers"][0], rep)
    return ctx, [f for f in load_rules().evaluate(ctx) if f.rule_id == RULE]


def test_the_collapsed_gb10_run_is_a_medium_finding():
    ctx, found = _findings("GB10 26B-A4B NVFP4 MTP c256 (collapse)")
    assert ctx["perf"]["verdict"] == "slower"
    assert [f.severity for f in found] == ["medium"]
    assert "far slower than its performance model predicts" in found[0].message
    assert "13.3" in found[0].message  # the measured TTFT median, in seconds


def test_a_throttled_looking_server_is_a_low_finding():
    """LIGHT's command measured 7x slower than the card (1 s TPOT instead of 141 ms)."""
    ctx, found = _findings("LIGHT 4K/512 c64", tpot_s=1.0)
    assert ctx["perf"]["ratio"] > ctx["perf"]["band"][1]
    assert [f.severity for f in found] == ["low"]


def test_the_seed_measurements_raise_nothing():
    for name in ("LIGHT 4K/512 c64", "PUSH 4K/512", "PUSH 16K/1K c128",
                 "GB10 31B NVFP4 EAGLE3 c1"):
        ctx, found = _findings(name)
        assert ctx["perf"]["verdict"] == "agrees", name
        assert found == [], name


def test_no_latency_measured_no_perf_verdict():
    rep = report(POINTS["LIGHT 4K/512 c64"], measured=False)
    ctx = build_context(rep["servers"][0], rep)
    assert ctx["perf"]["available"] is False
    assert ctx["perf"]["reason"] == "the server measured no TPOT, TTFT or throughput"


def test_the_finding_and_the_recommendation_read_the_same_ratio():
    from advice.perfmodel import predict_commands

    for name in ("LIGHT 4K/512 c64", "GB10 26B-A4B NVFP4 MTP c256 (collapse)"):
        ctx, _ = _findings(name)
        calibration = predict_commands(ctx, ctx)["calibration"]
        assert (calibration["ratio"], calibration["trusted"]) == \
            (ctx["perf"]["ratio"], ctx["perf"]["trusted"]), name
