"""A rule that predicts a start-up failure (``predicts: startup_failure``) is dropped on a server
the report shows serving: /metrics answered, GET /v1/models answered, or a live probe got an
answer. A server that started with this command cannot have failed to start; the same rule
keeps its severity on a server not seen serving. Reports are built here, not read from cases.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from audit.kb.context import build_context
from audit.kb.engine import RuleError, load_rules
from audit.kb.evidence_of_serving import serving_evidence

sys.path.insert(0, str(Path(__file__).resolve().parent))
from casekit import report_skeleton, server_entry  # noqa: E402
from test_engine import a_rule, write_rules  # noqa: E402

GIB = 1024 ** 3
METRICS = ('# TYPE vllm:num_requests_running gauge\n'
           'vllm:num_requests_running{engine="0",model_name="m"} 1.0\n')


@pytest.fixture(scope="module")
def kb():
    return load_rules()


def _report(argv: list[str], version: str = "0.14.0", *, gpus: int = 1, memory_gib: int = 24,
            name: str = "NVIDIA L4", models: list[dict[str, Any]] | None = None,
            metrics: str | None = None) -> dict[str, Any]:
    cards = [{"uuid": f"GPU-{i}", "name": name, "index": i,
              "memory_total_bytes": memory_gib * GIB} for i in range(gpus)]
    report = report_skeleton("host-serving", cards)
    entry = server_entry(argv, version, gpu_uuids=[c["uuid"] for c in cards], metrics=metrics)
    entry["models"] = list(models or [])
    report["servers"].append(entry)
    return report


def _ctx(report: dict[str, Any]) -> dict[str, Any]:
    return build_context(report["servers"][0], report)


BIG = ["vllm", "serve", "meta-llama/Llama-3.1-70B-Instruct", "--max-model-len", "8192"]


def test_serving_evidence_reads_metrics_models_and_answered_probes():
    assert serving_evidence({"models": []}, {"available": False}, {}) == []
    assert serving_evidence({"models": [{"id": "m"}]}, {"available": True},
                            {"p": {"outcome": "confirmed"}}) == ["metrics", "models", "probes"]
    # A probe that got no answer ("none", "error") is no evidence.
    assert serving_evidence({}, {}, {"p": {"outcome": "none"}}) == []


def test_context_says_serving_only_with_evidence():
    assert _ctx(_report(BIG))["server"]["serving"] is False
    ctx = _ctx(_report(BIG, models=[{"id": "meta-llama/Llama-3.1-70B-Instruct"}]))
    assert ctx["server"]["serving"] is True and ctx["server"]["serving_evidence"] == ["models"]
    assert _ctx(_report(BIG, metrics=METRICS))["server"]["serving"] is True


def test_a_startup_prediction_is_dropped_on_a_serving_server(tmp_path):
    kb = load_rules([write_rules(tmp_path, a_rule(
        severity="critical", predicts="startup_failure",
        condition="flags.max_model_len != null"))])
    assert [f.severity for f in kb.evaluate(_ctx(_report(BIG)))] == ["critical"]
    assert list(kb.evaluate(_ctx(_report(BIG, models=[{"id": "x"}])))) == []
    assert list(kb.evaluate(_ctx(_report(BIG, metrics=METRICS)))) == []


def test_a_rule_without_predicts_still_fires_on_a_serving_server(tmp_path):
    kb = load_rules([write_rules(tmp_path, a_rule(condition="flags.max_model_len != null"))])
    assert [f.severity for f in kb.evaluate(_ctx(_report(BIG, models=[{"id": "x"}])))] \
        == ["medium"]


def test_predicts_refuses_an_unknown_value(tmp_path):
    with pytest.raises(RuleError, match="predicts"):
        load_rules([write_rules(tmp_path, a_rule(predicts="crash"))])


def test_weights_do_not_fit_is_critical_only_when_not_seen_serving(kb):
    # 70B bf16 weights (~130 GiB) on one 24 GiB GPU: a start that cannot load.
    fired = {f.rule_id: f for f in kb.evaluate(_ctx(_report(BIG)))}
    assert fired["mf-weights-do-not-fit"].severity == "critical"
    serving = _report(BIG, models=[{"id": "meta-llama/Llama-3.1-70B-Instruct"}])
    assert "mf-weights-do-not-fit" not in {f.rule_id for f in kb.evaluate(_ctx(serving))}


def test_cudagraph_headroom_is_a_risk_on_a_serving_server(kb):
    argv = ["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct", "--gpu-memory-utilization", "0.95"]
    fired = {f.rule_id: f for f in kb.evaluate(_ctx(_report(argv, memory_gib=80,
                                                            name="NVIDIA H100 80GB HBM3")))}
    assert fired["up-gpu-mem-util-no-cudagraph-headroom"].severity == "high"
    serving = _report(argv, memory_gib=80, name="NVIDIA H100 80GB HBM3",
                      models=[{"id": "Qwen/Qwen2.5-7B-Instruct"}])
    fired = {f.rule_id: f for f in kb.evaluate(_ctx(serving))}
    assert fired["up-gpu-mem-util-no-cudagraph-headroom"].severity == "medium"


def test_every_startup_prediction_is_a_start_up_claim(kb):
    # The tag is for claims about this start; a finding about the next restart of another
    # installed release keeps firing on a serving server.
    tagged = {r.id for r in kb.rules if r.predicts == "startup_failure"}
    assert "mf-weights-do-not-fit" in tagged and "vllm-next-restart-rejects-flag" not in tagged


def test_an_upgrade_plan_keeps_start_up_findings_of_the_restarted_server(kb):
    # The server serves on its release; the planned restart on another one has not been seen
    # serving, so what would stop that start is still reported.
    from advice.planner import plan_server

    report = _report(BIG, models=[{"id": "meta-llama/Llama-3.1-70B-Instruct"}])
    plan = plan_server(report["servers"][0], report, "0.15.1", None, kb)
    assert "mf-weights-do-not-fit" in {f["rule_id"] for f in plan["appear"]}
