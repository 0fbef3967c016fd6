"""Metrics added in vLLM 0.19-0.33, read from expositions shaped like those releases'
(label sets from the wheel tables) and the rules that use them."""

from __future__ import annotations

import pytest
from casekit import seed_report

from audit.kb import metrics as metrics_mod
from audit.kb.context import build_context
from audit.kb.engine import load_rules
from audit.kb.vllm_tables import table

H100 = {"index": 0, "uuid": "GPU-0", "name": "NVIDIA H100 80GB HBM3",
        "memory_total_bytes": 85520809984, "compute_capability": "9.0"}


def exposition(release: str, **values: float) -> str:
    """A /metrics text of ``release``: only the series that release exports (its table),
    with its label names; counters as ``_total``."""
    known = table(release)["metrics"]
    lines = []

    def emit(name: str, kind: str, samples: list[tuple[dict, float]]) -> None:
        if name not in known:
            return
        lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            base = {"model_name": "m"}
            if "engine" in known[name]["labels"]:
                base["engine"] = "0"
            text = ",".join(f'{k}="{v}"' for k, v in sorted({**base, **labels}.items()))
            suffix = labels.pop("__suffix__", "") if "__suffix__" in labels else ""
            lines.append(f"{name}{suffix}{{{text}}} {value}")

    emit("vllm:num_requests_running", "gauge", [({}, values.get("running", 64))])
    emit("vllm:num_requests_waiting", "gauge", [({}, values.get("waiting", 0))])
    emit("vllm:kv_cache_usage_perc", "gauge", [({}, values.get("kv", 0.5))])
    emit("vllm:num_requests_waiting_by_reason", "gauge",
         [({"reason": "capacity"}, values.get("capacity", 0)),
          ({"reason": "deferred"}, values.get("deferred", 0))])
    for name, key in (("vllm:prompt_tokens", "prompt"), ("vllm:prompt_tokens_cached", "cached"),
                      ("vllm:generation_tokens", "generation")):
        if name in known:
            lines += [f"# TYPE {name} counter",
                      f'{name}_total{{engine="0",model_name="m"}} {values.get(key, 0)}']
    if "vllm:admission_rejections" in known:
        lines.append("# TYPE vllm:admission_rejections counter")
        for reason in ("max_num_queued_reqs", "max_num_queued_tokens"):
            lines.append(f'vllm:admission_rejections_total{{model_name="m",reason="{reason}"}} '
                         f'{values.get(reason, 0)}')
    if "vllm:tool_call_parser_invocations" in known:
        lines.append("# TYPE vllm:tool_call_parser_invocations counter")
        for outcome in ("tool_call", "no_tool_call"):
            lines.append(
                'vllm:tool_call_parser_invocations_total{mode="streaming",model_name="m",'
                f'outcome="{outcome}",request_type="chat_completions"}} '
                f'{values.get(outcome, 0)}')
    if "vllm:request_num_preemptions" in known:
        lines.append("# TYPE vllm:request_num_preemptions histogram")
        cumulative = values.get("preempt_buckets", [1000, 1000, 1000, 1000])
        for le, count in zip(("0.0", "1.0", "2.0", "5.0"), cumulative, strict=True):
            lines.append(f'vllm:request_num_preemptions_bucket{{engine="0",le="{le}",'
                         f'model_name="m"}} {count}')
        lines += [f'vllm:request_num_preemptions_bucket{{engine="0",le="+Inf",model_name="m"}} '
                  f'{cumulative[-1]}',
                  f'vllm:request_num_preemptions_count{{engine="0",model_name="m"}} '
                  f'{cumulative[-1]}',
                  f'vllm:request_num_preemptions_sum{{engine="0",model_name="m"}} '
                  f'{values.get("preempt_sum", 0)}']
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def kb():
    return load_rules()


def fired(kb, text: str, version: str, argv: list[str] | None = None,
          before: str | None = None) -> dict:
    """Findings on one scrape, or on the window from scrape ``before`` 60 s earlier."""
    def report(body: str, at: str) -> dict:
        server = {"pid": 1, "base_url": "http://127.0.0.1:8000", "vllm_version": version,
                  "installed_vllm_version": version,
                  "argv": argv or ["vllm", "serve", "Qwen/Qwen3-8B"],
                  "metrics": {"text": body, "scraped_at": at}}
        return {"host": {"hostname": "h"}, "gpus": [H100], "servers": [server],
                "collected_at": at}
    now = report(text, "2026-12-01T06:00:00Z")
    history = [report(before, "2026-12-01T05:59:00Z")] if before is not None else []
    return {f.rule_id: f for f in kb.evaluate(build_context(now["servers"][0], now, history))}


def test_the_window_reads_every_new_metric_of_a_0_33_exposition() -> None:
    text = exposition("0.33.0", capacity=12, deferred=3, prompt=1_000_000, cached=400_000,
                      max_num_queued_reqs=40, max_num_queued_tokens=2, tool_call=7,
                      no_tool_call=93, preempt_buckets=[900, 950, 980, 1000], preempt_sum=140)
    window = metrics_mod.window(None, metrics_mod.parse(text), None)
    assert window["requests_waiting_capacity"] == 12 and window["requests_waiting_deferred"] == 3
    assert window["admission_rejections"] == 42
    assert window["admission_rejections_by_reason"] == {"max_num_queued_reqs": 40.0,
                                                        "max_num_queued_tokens": 2.0}
    assert window["prompt_cached_fraction"] == pytest.approx(0.4)
    assert window["tool_parser_invocations"] == 100 and window["tool_parser_tool_calls"] == 7
    assert window["request_preemptions_mean"] == pytest.approx(0.14)
    assert 2 < window["request_preemptions_p99"] <= 5


def test_an_older_exposition_leaves_the_new_values_unknown_not_zero() -> None:
    window = metrics_mod.window(None, metrics_mod.parse(exposition("0.15.1", prompt=10)), None)
    assert window["admission_rejections"] is None
    assert window["requests_waiting_capacity"] is None
    assert window["tool_parser_invocations"] is None
    assert window["request_preemptions_p99"] is None


def test_admission_rejections_are_a_finding_on_0_32(kb) -> None:
    found = fired(kb, exposition("0.32.0", max_num_queued_reqs=40), "0.32.0")
    assert found["vllm-admission-rejections"].severity == "medium"
    assert "max_num_queued_reqs" in found["vllm-admission-rejections"].message
    assert "vllm-admission-rejections" not in fired(kb, exposition("0.32.0"), "0.32.0")


def test_requests_waiting_for_capacity_on_0_20(kb) -> None:
    queued = exposition("0.20.0", capacity=12, waiting=12, kv=0.97)
    found = fired(kb, queued, "0.20.0", before=queued)
    assert "12 requests are waiting for capacity" in found["vllm-waiting-for-capacity"].message
    assert "vllm-waiting-for-capacity" not in fired(kb, queued, "0.20.0")  # one scrape
    deferred = exposition("0.20.0", capacity=0, deferred=12, waiting=12)
    assert "vllm-waiting-for-capacity" not in fired(kb, deferred, "0.20.0", before=deferred)


def test_repeated_preemptions_per_request_on_0_30(kb) -> None:
    text = exposition("0.30.0", preempt_buckets=[900, 950, 980, 1000], preempt_sum=140)
    assert "vllm-requests-preempted-repeatedly" in fired(kb, text, "0.30.0")
    calm = exposition("0.30.0", preempt_buckets=[995, 1000, 1000, 1000], preempt_sum=5)
    assert "vllm-requests-preempted-repeatedly" not in fired(kb, calm, "0.30.0")


def test_a_cold_prefix_cache_on_0_19(kb) -> None:
    cold = exposition("0.19.1", prompt=1_000_000, cached=1_000)
    assert fired(kb, cold, "0.19.1")["vllm-prefix-cache-cold"].severity == "low"
    warm = exposition("0.19.1", prompt=1_000_000, cached=300_000)
    assert "vllm-prefix-cache-cold" not in fired(kb, warm, "0.19.1")
    off = ["vllm", "serve", "Qwen/Qwen3-8B", "--no-enable-prefix-caching"]
    assert "vllm-prefix-cache-cold" not in fired(kb, cold, "0.19.1", off)


def test_a_gemma4_tool_parser_that_never_yields_a_call_on_0_26(kb) -> None:
    report = seed_report("PUSH", version="0.26.0",
                         metrics=exposition("0.26.0", no_tool_call=120, tool_call=0))
    server = report["servers"][0]
    found = {f.rule_id: f for f in kb.evaluate(build_context(server, report))}
    assert "gemma4-tool-parser-yields-no-tool-calls" in found
    assert "#50477" in found["gemma4-tool-parser-yields-no-tool-calls"].message
    report = seed_report("PUSH", version="0.26.0",
                         metrics=exposition("0.26.0", no_tool_call=100, tool_call=20))
    found = {f.rule_id for f in kb.evaluate(build_context(report["servers"][0], report))}
    assert "gemma4-tool-parser-yields-no-tool-calls" not in found
