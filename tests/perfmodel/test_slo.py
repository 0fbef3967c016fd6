"""Per-host latency targets (host labels) pick among the layouts of the recommended command."""

from __future__ import annotations

import io
import json

import pytest
from seedpoints import POINTS, report

from advice.perfmodel import predict_commands
from advice.recommend.cli import run_recommend
from audit.kb.context import build_context


def _ctx(rep):
    return build_context(rep["servers"][0], rep)


def _long_pair(labels):
    """Current: PUSH (TP=2) at 16K/1K c=128; recommended: the same flags as 2 x TP=1."""
    point = POINTS["PUSH 16K/1K c128"]
    current = report(point)
    current["host"]["labels"] = labels
    flags = list(point["flags"])
    flags[flags.index("--tensor-parallel-size") + 1] = "1"
    tp1 = report({**point, "gpus": 1, "flags": tuple(flags)})
    return predict_commands(_ctx(current), _ctx(tp1), replicas=2)


def test_a_ttft_target_the_recommended_layout_misses_points_to_one_that_meets_it():
    """The card: TTFT 58-137 s at TP=2 vs 200-319 s at TP=1 for 16K prompts."""
    out = _long_pair({"slo-ttft-ms": "150000"})
    chosen = out["slo"]
    assert chosen["targets"] == {"ttft_s": 150.0}
    rows = {row["layout"]: row for row in chosen["layouts"]}
    assert rows["2 x TP=1"]["meets"] is False and rows["1 x TP=2"]["meets"] is True
    assert chosen["met"] is False and chosen["pick"] == "1 x TP=2"
    assert chosen["summary"].endswith("prefer that layout")


def test_a_target_no_layout_meets_is_said_plainly():
    out = _long_pair({"slo-tpot-ms": "20"})
    assert out["slo"]["pick"] is None
    assert "no layout on these 2 GPUs meets it" in out["slo"]["summary"]


@pytest.mark.parametrize("value", ["fast", "-5", "nan", "1e999", "0"])
def test_a_hostile_label_is_ignored_and_named(value):
    out = _long_pair({"slo-tpot-ms": value})
    assert out["status"] == "ok"
    assert out["slo"]["summary"] is None
    assert out["slo"]["ignored"] == [
        f"label slo-tpot-ms={value!r} ignored: not a positive number of milliseconds"]


def test_no_labels_no_slo_block():
    assert _long_pair({})["slo"] is None


def test_the_cli_json_carries_the_slo_answer(tmp_path):
    rep = report(POINTS["PUSH 4K/512"])
    rep["host"]["labels"] = {"slo-tpot-ms": "100"}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(rep))
    out = io.StringIO()
    assert run_recommend(str(path), None, "json", out=out, err=io.StringIO()) == 0
    pred = json.loads(out.getvalue())["servers"][0]["prediction"]
    assert pred["slo"]["targets"] == {"tpot_s": 0.1}
    assert {row["layout"] for row in pred["slo"]["layouts"]} == {"2 x TP=1", "1 x TP=2"}
