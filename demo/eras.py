"""The /metrics naming eras of vLLM releases the simulator renders (one real capture each).

Split from :mod:`demo.exposition` so :mod:`demo.traffic` can name a server's era without
importing the renderer that in turn renders a :class:`~demo.traffic.TrafficState`.
Capture files live in ``demo/data/cases/metrics`` (``INDEX.md`` says which version each is).
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import InvalidVersion, Version


@dataclass(frozen=True)
class Era:
    """One naming era: the capture used as template and what partial captures lack."""

    since: str | None
    capture: str
    #: histograms to add when the capture does not carry them (partial captures)
    extra_histograms: tuple[str, ...] = ()
    kv_gauge: str = "vllm:kv_cache_usage_perc"
    spec: bool = True


_OLD_HIST = ("vllm:time_to_first_token_seconds", "vllm:time_per_output_token_seconds",
             "vllm:e2e_request_latency_seconds", "vllm:request_prompt_tokens",
             "vllm:request_generation_tokens")
ERAS: tuple[Era, ...] = (
    Era(None, "aibrix-runtime-doc_v0-engine_2025-01.prom", _OLD_HIST,
        kv_gauge="vllm:gpu_cache_usage_perc", spec=False),
    Era("0.8.0", "production-stack-318_v1-early_2025-03.prom",
        (*_OLD_HIST, "vllm:request_queue_time_seconds"), kv_gauge="vllm:gpu_cache_usage_perc",
        spec=False),
    Era("0.9.0", "production-stack-318_v1-early_2025-03.prom",
        (*_OLD_HIST, "vllm:request_queue_time_seconds"), kv_gauge="vllm:gpu_cache_usage_perc"),
    Era("0.10.0", "production-stack-617_v0.10.0_glm45.prom",
        (*_OLD_HIST, "vllm:request_queue_time_seconds")),
    Era("0.11.0", "hardware-aware-router_v0.11.x_qwen1.5-0.5b-idle.prom"),
    Era("0.20.0", "vllm-benchmarking-fixture_v0.25.1_opt-125m-ngram3-specdecode.prom"),
    Era("0.29.0", "inferstack-fixture_v0.29.0_qwen2.5-1.5b-t4.prom"),
)


def era_for(version: str | None) -> Era:
    """The naming era of ``version`` (PEP 440; unparsable tags get the newest era)."""
    try:
        parsed = Version(version) if version else None
    except InvalidVersion:
        parsed = None
    if parsed is None:
        return ERAS[-1]
    chosen = ERAS[0]
    for era in ERAS[1:]:
        if parsed.release >= Version(era.since).release:
            chosen = era
    return chosen
