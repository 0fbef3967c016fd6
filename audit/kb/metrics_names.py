"""Name tables mapping every vLLM /metrics naming era onto the canonical names of audit.kb.metrics.

Sources for the renames (all in docs/vllm-facts.md section 1.3 and
demo/data/cases/metrics/INDEX.md "Metric-name changes observed across versions"):

- `vllm:gpu_cache_usage_perc` -> `vllm:kv_cache_usage_perc` (PR #18354, removed for 0.12 by
  https://github.com/vllm-project/vllm/pull/29330).
- `vllm:gpu_prefix_cache_{queries,hits}` -> `vllm:prefix_cache_{queries,hits}` (same PRs).
- `vllm:time_per_output_token_seconds` (inter-token gaps) -> `vllm:inter_token_latency_seconds`
  (https://github.com/vllm-project/vllm/pull/24110, removed by PR #32661).
- V0 `vllm:time_in_queue_requests` -> `vllm:request_queue_time_seconds` (PR #15458, #18837).
- V0 Info `vllm:cache_config` (exposed as `vllm:cache_config_info`) -> V1 gauge
  `vllm:cache_config_info` (https://github.com/vllm-project/vllm/pull/13299).

Each source carries a priority: 0 is the current name, 1 an older alias used only when the
current name is absent from the same exposition.
"""

from __future__ import annotations

# canonical counter -> [(metric base name without `_total`, priority)]
COUNTER_SOURCES: dict[str, list[tuple[str, int]]] = {
    "prompt_tokens": [("vllm:prompt_tokens", 0)],
    "generation_tokens": [("vllm:generation_tokens", 0)],
    "preemptions": [("vllm:num_preemptions", 0)],
    "prefix_cache_queries": [
        ("vllm:prefix_cache_queries", 0),
        ("vllm:gpu_prefix_cache_queries", 1),
    ],
    "prefix_cache_hits": [("vllm:prefix_cache_hits", 0), ("vllm:gpu_prefix_cache_hits", 1)],
    "mm_cache_queries": [("vllm:mm_cache_queries", 0)],
    "mm_cache_hits": [("vllm:mm_cache_hits", 0)],
    "request_success": [("vllm:request_success", 0)],
    "spec_drafts": [("vllm:spec_decode_num_drafts", 0)],
    "spec_draft_tokens": [("vllm:spec_decode_num_draft_tokens", 0)],
    "spec_accepted_tokens": [("vllm:spec_decode_num_accepted_tokens", 0)],
    # Added after 0.19 (first release in the wheel tables, audit/kb/data/vllm):
    # vllm:prompt_tokens_cached 0.19.1, vllm:tool_call_parser_invocations 0.24.0,
    # vllm:admission_rejections 0.32.0.
    "prompt_tokens_cached": [("vllm:prompt_tokens_cached", 0)],
    "tool_parser_invocations": [("vllm:tool_call_parser_invocations", 0)],
    "admission_rejections": [("vllm:admission_rejections", 0)],
}

# Counters that must come from the same naming generation (their units changed with the name).
LINKED_COUNTERS = (frozenset({"prefix_cache_queries", "prefix_cache_hits"}),)

# canonical gauge -> [(sample name, priority)], and how engines/models combine.
GAUGE_SOURCES: dict[str, list[tuple[str, int]]] = {
    "kv_cache_usage": [("vllm:kv_cache_usage_perc", 0), ("vllm:gpu_cache_usage_perc", 1)],
    "requests_running": [("vllm:num_requests_running", 0)],
    "requests_waiting": [("vllm:num_requests_waiting", 0)],
    # V0 only: cumulative hit rate in 0..1, -1 when prefix caching is disabled.
    "prefix_cache_hit_rate": [("vllm:gpu_prefix_cache_hit_rate", 1)],
}
GAUGE_MEAN = frozenset({"kv_cache_usage", "prefix_cache_hit_rate"})

# canonical histogram -> [(metric base name, priority)]
HISTOGRAM_SOURCES: dict[str, list[tuple[str, int]]] = {
    "ttft": [("vllm:time_to_first_token_seconds", 0)],
    "itl": [("vllm:inter_token_latency_seconds", 0), ("vllm:time_per_output_token_seconds", 1)],
    "tpot": [("vllm:request_time_per_output_token_seconds", 0)],
    "e2e": [("vllm:e2e_request_latency_seconds", 0)],
    "queue_time": [("vllm:request_queue_time_seconds", 0), ("vllm:time_in_queue_requests", 1)],
    "prompt_len": [("vllm:request_prompt_tokens", 0)],
    "generation_len": [("vllm:request_generation_tokens", 0)],
    # Preemptions per finished request (histogram), 0.30.0+.
    "request_preemptions": [("vllm:request_num_preemptions", 0)],
}

# Series kept per label value as well (summed over the other labels): sample name ->
# (canonical name, label). Label values in the 0.33.0 wheel: reason max_num_queued_reqs /
# max_num_queued_tokens (vllm/v1/metrics/loggers.py ADMISSION_REASONS), waiting reason
# capacity / deferred (WAITING_REASON_*, 0.20.0+), outcome tool_call / no_tool_call
# (vllm/parser/metrics.py ToolCallOutcome).
LABELLED: dict[str, tuple[str, str]] = {
    "vllm:admission_rejections": ("admission_rejections", "reason"),
    "vllm:admission_rejections_total": ("admission_rejections", "reason"),
    "vllm:num_requests_waiting_by_reason": ("requests_waiting", "reason"),
    "vllm:tool_call_parser_invocations": ("tool_parser_invocations", "outcome"),
    "vllm:tool_call_parser_invocations_total": ("tool_parser_invocations", "outcome"),
}

PER_POSITION_BASE = "vllm:spec_decode_num_accepted_tokens_per_pos"
INFO_NAMES = frozenset({"vllm:cache_config_info", "vllm:cache_config"})

# Names that exist only in the V0 engine (vllm-facts 1.3: "none (V0-only)").
V0_ONLY = frozenset(
    {
        "vllm:num_requests_swapped",
        "vllm:cpu_cache_usage_perc",
        "vllm:cpu_prefix_cache_hit_rate",
        "vllm:gpu_prefix_cache_hit_rate",
        "vllm:time_in_queue_requests_bucket",
        "vllm:model_forward_time_milliseconds_bucket",
        "vllm:model_execute_time_milliseconds_bucket",
        "vllm:avg_prompt_throughput_toks_per_s",
        "vllm:avg_generation_throughput_toks_per_s",
        "vllm:spec_decode_draft_acceptance_rate",
    }
)
# Names that only the V1 engine emits (present before the `engine` label was added).
V1_ONLY = frozenset(
    {
        "vllm:kv_cache_usage_perc",
        "vllm:prefix_cache_queries_total",
        "vllm:gpu_prefix_cache_queries_total",
        "vllm:inter_token_latency_seconds_bucket",
        "vllm:spec_decode_num_drafts_total",
    }
)

SPEC_NAMES = ("spec_drafts", "spec_draft_tokens", "spec_accepted_tokens")
# Canonical names a rule may read; `missing` in a window lists those the exposition lacks.
RULE_NAMES = (
    "kv_cache_usage",
    "requests_running",
    "requests_waiting",
    "preemptions",
    "prompt_tokens",
    "generation_tokens",
    "request_success",
    "prefix_cache_queries",
    "prefix_cache_hits",
    "mm_cache_queries",
    "ttft",
    "tpot",
    "itl",
    "e2e",
    "queue_time",
    "prompt_len",
)


def build_index() -> dict[str, tuple[str, str, int, str]]:
    """Map every exposed sample name to (kind, canonical, priority, role).

    kind is "counter" | "gauge" | "hist" | "perpos" | "info"; role is "" or, for histograms,
    "bucket" | "sum" | "count". Counters are accepted with and without the `_total` suffix
    (prometheus_client adds it; hand-written fixtures sometimes drop it).
    """
    index: dict[str, tuple[str, str, int, str]] = {}
    for canon, sources in COUNTER_SOURCES.items():
        for base, prio in sources:
            index[base] = ("counter", canon, prio, "")
            index[base + "_total"] = ("counter", canon, prio, "")
    for canon, sources in GAUGE_SOURCES.items():
        for name, prio in sources:
            index[name] = ("gauge", canon, prio, "")
    for canon, sources in HISTOGRAM_SOURCES.items():
        for base, prio in sources:
            for role in ("bucket", "sum", "count"):
                index[f"{base}_{role}"] = ("hist", canon, prio, role)
    index[PER_POSITION_BASE] = ("perpos", "spec_per_position", 0, "")
    index[PER_POSITION_BASE + "_total"] = ("perpos", "spec_per_position", 0, "")
    for name in INFO_NAMES:
        index[name] = ("info", "cache_config", 0, "")
    return index


SAMPLE_INDEX = build_index()
