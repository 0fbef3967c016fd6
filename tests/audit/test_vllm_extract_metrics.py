"""The static metric reader (audit.kb.vllm_extract.metrics) on hand-written sources, one per
declaration shape a vLLM release uses: a metric declared in any of these shapes is one the
table (and so the live-metrics checks) knows for that release."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from audit.kb.vllm_extract.source import SourceTree, read_metrics

SOURCES = {
    # plain constructor, a local label list extended, a positional label list
    "vllm/v1/metrics/plain.py": """
        import prometheus_client
        class Logger:
            def __init__(self, labelnames):
                base = ["model_name", "engine"]
                self.a = prometheus_client.Counter(name="vllm:plain_requests_total",
                                                   documentation="d", labelnames=base)
                self.b = prometheus_client.Gauge("vllm:plain_waiting", "d", base + ["reason"])
        """,
    # names from a module constant, a class constant, a prefix + suffix, an f-string whose
    # run-time part (a parameter) stays a placeholder
    "vllm/v1/metrics/consts.py": """
        from prometheus_client import Counter, Histogram
        PREFIX = "vllm:const_"
        TOOL_TOTAL = "vllm:const_tool_calls_total"
        class Names:
            LATENCY = "vllm:const_latency_seconds"
        def build(labelnames, kind):
            Counter(name=TOOL_TOTAL, documentation="d", labelnames=["mode"])
            Histogram(name=Names.LATENCY, documentation="d", labelnames=labelnames)
            Counter(name=PREFIX + "hits", documentation="d")
            Counter(name=f"{PREFIX}{kind}_x", documentation="d")
        """,
    # info metric through a helper: the name is a local assigned in one branch
    "vllm/v1/metrics/info.py": """
        class Logger:
            def log_info(self, type, config):
                info = config.metrics_info()
                name = None
                if type == "cache_config":
                    name = "vllm:sample_config_info"
                gauge = self._gauge_cls(name=name, documentation="d",
                                        labelnames=info.keys())
        """,
    # a factory looping over (name, doc) lists assigned in both branches of an if
    "vllm/v1/spec/metrics.py": """
        class Prom:
            def __init__(self, labelnames, diffusion):
                if diffusion:
                    specs = [("vllm:loop_steps", "d")]
                else:
                    specs = [("vllm:loop_drafts", "d"), ("vllm:loop_tokens", "d")]
                self.counters = [self._counter_cls(name=name, documentation=doc,
                                                   labelnames=labelnames)
                                 for name, doc in specs]
        """,
    # a dict of definitions keyed by class constants, one also built by a constructor
    "vllm/connector/metrics.py": """
        from prometheus_client import Counter
        class _Names:
            LOAD_BYTES = "vllm:dict_load_bytes"
            LOAD_SIZE = "vllm:dict_load_size"
        LEGACY = "vllm:dict_legacy_bytes"
        def definitions():
            return {_Names.LOAD_BYTES: OffloadingCounterMetadata(documentation="d"),
                    _Names.LOAD_SIZE: OffloadingHistogramMetadata(documentation="d"),
                    LEGACY: OffloadingCounterMetadata(documentation="d")}
        class Prom:
            def __init__(self, labelnames):
                Counter(name=LEGACY, documentation="d",
                        labelnames=labelnames + ["transfer_type"])
        """,
    # the V0 engine's metrics are kept apart from the V1 metric of the same name
    "vllm/engine/metrics.py": """
        import prometheus_client
        class Metrics:
            def __init__(self, labelnames):
                self.g = prometheus_client.Gauge(name="vllm:plain_waiting",
                                                 documentation="d", labelnames=labelnames)
        """,
    # a string that merely mentions a metric declares nothing
    "vllm/v1/metrics/doc.py": """
        QUERY = "rate(vllm:plain_requests_total[5m])"
        def explain():
            return "vllm:not_a_metric"
        """,
}


@pytest.fixture
def metrics(tmp_path: Path) -> dict[str, dict]:
    for path, text in SOURCES.items():
        target = tmp_path / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(textwrap.dedent(text))
    return read_metrics(SourceTree(tmp_path))


def test_every_declaration_shape_is_found_and_nothing_else(metrics: dict) -> None:
    assert set(metrics) == {
        "vllm:plain_requests", "vllm:plain_waiting", "vllm:plain_waiting  [V0]",
        "vllm:const_tool_calls", "vllm:const_latency_seconds", "vllm:const_hits",
        "vllm:const_{kind}_x", "vllm:sample_config_info", "vllm:loop_steps",
        "vllm:loop_drafts", "vllm:loop_tokens", "vllm:dict_load_bytes",
        "vllm:dict_load_size", "vllm:dict_legacy_bytes"}


def test_types_exposed_names_and_labels(metrics: dict) -> None:
    assert metrics["vllm:plain_requests"]["exposed_as"] == ["vllm:plain_requests_total"]
    assert metrics["vllm:plain_requests"]["labels"] == ["model_name", "engine"]
    assert metrics["vllm:plain_waiting"]["type"] == "gauge"
    assert metrics["vllm:plain_waiting"]["labels"] == ["model_name", "engine", "reason"]
    assert metrics["vllm:const_tool_calls"]["labels"] == ["mode"]
    assert metrics["vllm:const_latency_seconds"]["type"] == "histogram"
    assert metrics["vllm:const_latency_seconds"]["labels"] == ["<labelnames>"]
    assert metrics["vllm:sample_config_info"]["labels"] == ["<keys of info>"]
    assert metrics["vllm:loop_steps"]["type"] == "counter"
    assert metrics["vllm:dict_load_size"]["type"] == "histogram"
    assert metrics["vllm:dict_load_size"]["exposed_as"][0] == "vllm:dict_load_size_bucket"
    # the constructor's labels win over the bare definition's
    assert metrics["vllm:dict_legacy_bytes"]["labels"] == ["<labelnames>", "transfer_type"]
