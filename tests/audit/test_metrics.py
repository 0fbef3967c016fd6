"""audit.kb.metrics against the real /metrics captures in demo/data/cases/metrics/.

Expected numbers are read from the capture files with prometheus_client directly (an oracle
independent of the module's own name mapping) or quoted from the file where a test says so.
Two-scrape windows are built by advancing the counters and histograms of a real capture.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from audit.kb.metrics import Histogram, MetricSnapshot, histogram_quantile, parse, window
from demo.paths import capture_paths, metrics_dir

CASES = metrics_dir()  # FileNotFoundError (collection error) when the data is missing
ALL_CAPTURES = capture_paths()

WINDOW_KEYS = {
    "window_kind", "window_s", "kv_cache_usage", "requests_running", "requests_waiting",
    "preemptions", "preemptions_per_s", "prompt_tps", "generation_tps", "requests_finished",
    "ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "itl_p50_s", "itl_p99_s",
    "e2e_p50_s", "queue_p50_s", "prompt_len_p50", "prompt_len_p90", "prompt_len_p99",
    "prefix_cache_hit_rate", "mm_items", "spec_drafts", "spec_draft_tokens",
    "spec_accepted_tokens", "spec_acceptance_rate", "spec_mean_acceptance_length",
    "spec_per_position", "kv_capacity_tokens", "kv_max_concurrency", "cache_dtype",
    "gpu_memory_utilization", "missing", "errors",
}  # fmt: skip

# file prefix -> era the INDEX.md gives for it
ERAS = {
    "aibrix-runtime-doc": "v0",
    "issue6337": "v0",
    "vllm-docs-serving-metrics": "v0",
    "production-stack-318": "v1-early",
    "production-stack-617": "v1",
    "pr22227": "v1",
    "pr24049": "v1",
    "vllm-metal-479": "v1",
    "hardware-aware-router": "v1",
    "evoke-vllm-fixture": "v1",
    "vllm-benchmarking-fixture": "v1",
    "lmswitch-fixture": "v1",
    "inferstack-fixture": "v1",
}

# canonical counter -> current exposed sample name (oracle cross-check)
COUNTER_NAMES = {
    "prompt_tokens": "vllm:prompt_tokens_total",
    "generation_tokens": "vllm:generation_tokens_total",
    "preemptions": "vllm:num_preemptions_total",
    "prefix_cache_queries": "vllm:prefix_cache_queries_total",
    "prefix_cache_hits": "vllm:prefix_cache_hits_total",
    "mm_cache_queries": "vllm:mm_cache_queries_total",
    "request_success": "vllm:request_success_total",
    "spec_drafts": "vllm:spec_decode_num_drafts_total",
    "spec_draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
    "spec_accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total",
}


def capture(prefix: str) -> str:
    """Text of the one capture whose file name starts with `prefix`."""
    (path,) = [p for p in ALL_CAPTURES if p.name.startswith(prefix)]
    return path.read_text()


def oracle(text: str, sample_name: str, **labels: str) -> float | None:
    """Sum of every sample called `sample_name` (matching `labels`), via prometheus_client."""
    values = [
        s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name == sample_name and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    return sum(values) if values else None


def bump(text: str, sample: str, delta: float, labels: str = "") -> str:
    """Add `delta` to every line of `sample` whose label text contains `labels`."""
    pattern = re.compile(rf"^({re.escape(sample)}(?:\{{[^}}]*\}})?) (\S+)$", re.M)

    def repl(m: re.Match[str]) -> str:
        if labels not in m.group(1):
            return m.group(0)
        return f"{m.group(1)} {float(m.group(2)) + delta!r}"

    return pattern.sub(repl, text)


def observe(text: str, base: str, value: float, n: int) -> str:
    """Record `n` observations of `value` in histogram `base` (buckets, _count, _sum)."""
    pattern = re.compile(rf'^({re.escape(base)}_bucket\{{[^}}]*le="([^"]+)"[^}}]*\}}) (\S+)$', re.M)

    def repl(m: re.Match[str]) -> str:
        hit = value <= float(m.group(2))
        return f"{m.group(1)} {float(m.group(3)) + (n if hit else 0)!r}"

    text = pattern.sub(repl, text)
    text = bump(text, f"{base}_count", n)
    return bump(text, f"{base}_sum", value * n)


# --- every capture ------------------------------------------------------------------------


@pytest.mark.parametrize("path", ALL_CAPTURES, ids=lambda p: p.name)
def test_every_capture_parses_without_errors_and_gets_its_era(path: Path) -> None:
    snap = parse(path.read_text())
    assert snap.errors == []
    (era,) = [era for prefix, era in ERAS.items() if path.name.startswith(prefix)]
    assert snap.era == era


@pytest.mark.parametrize("path", ALL_CAPTURES, ids=lambda p: p.name)
def test_every_capture_counter_matches_the_file_summed_over_engines(path: Path) -> None:
    text = path.read_text()
    snap = parse(text)
    for canon, sample_name in COUNTER_NAMES.items():
        expected = oracle(text, sample_name)
        if expected is not None:
            assert snap.counters[canon] == pytest.approx(expected), canon
    window_keys = set(window(None, snap, None))
    assert window_keys >= WINDOW_KEYS


@pytest.mark.parametrize("path", ALL_CAPTURES, ids=lambda p: p.name)
def test_every_capture_percentile_lies_in_the_bucket_holding_its_rank(path: Path) -> None:
    snap = parse(path.read_text())
    for name, hist in snap.histograms.items():
        finite = [(le, c) for le, c in hist.buckets if math.isfinite(le)]
        has_inf = bool(hist.buckets) and hist.buckets[-1][0] == math.inf
        total = hist.buckets[-1][1] if has_inf else hist.count
        for q in (0.5, 0.99):
            got = histogram_quantile(q, hist)
            if not total:
                assert got is None, name
                continue
            rank = q * total
            upper = next((le for le, c in finite if c >= rank), finite[-1][0])
            lower = max([0.0] + [le for le, c in finite if le < upper])
            assert lower <= got <= upper, (name, q)


# --- values each era can give ---------------------------------------------------------------


def test_ngram_capture_gives_full_acceptance_from_its_counters() -> None:
    text = capture("vllm-benchmarking-fixture_v0.25.1_opt-125m-ngram3")
    w = window(None, parse(text), None)
    drafts = oracle(text, "vllm:spec_decode_num_drafts_total")
    draft_tokens = oracle(text, "vllm:spec_decode_num_draft_tokens_total")
    accepted = oracle(text, "vllm:spec_decode_num_accepted_tokens_total")
    assert (drafts, draft_tokens, accepted) == (48, 144, 144)  # as in the file
    assert w["spec_drafts"] == 48
    assert w["spec_acceptance_rate"] == pytest.approx(accepted / draft_tokens) == 1.0
    assert w["spec_mean_acceptance_length"] == pytest.approx(1 + accepted / drafts) == 4.0
    per_pos = [oracle(text, "vllm:spec_decode_num_accepted_tokens_per_pos_total", position=p)
               for p in ("0", "1", "2")]  # fmt: skip
    assert w["spec_per_position"] == pytest.approx([v / drafts for v in per_pos])
    assert "spec_drafts" not in w["missing"]


def test_lmswitch_capture_gives_mtp_acceptance_and_per_position_rates() -> None:
    w = window(None, parse(capture("lmswitch")), None)
    assert (w["spec_drafts"], w["spec_draft_tokens"], w["spec_accepted_tokens"]) == (
        17807, 106842, 27189,
    )  # fmt: skip
    assert w["spec_acceptance_rate"] == pytest.approx(27189 / 106842)
    assert round(w["spec_acceptance_rate"], 4) == 0.2545
    assert w["spec_mean_acceptance_length"] == pytest.approx(1 + 27189 / 17807)
    assert round(w["spec_mean_acceptance_length"], 3) == 2.527
    assert len(w["spec_per_position"]) == 6
    assert w["spec_per_position"][0] == pytest.approx(12129 / 17807)
    assert w["spec_per_position"][5] == pytest.approx(668 / 17807)
    # per-position rates must fall with position (each later token needs all earlier ones)
    assert w["spec_per_position"] == sorted(w["spec_per_position"], reverse=True)


def test_lmswitch_capacity_comes_from_kv_cache_size_tokens_not_blocks_times_block_size() -> None:
    snap = parse(capture("lmswitch"))
    w = window(None, snap, None)
    assert w["kv_capacity_tokens"] == 1428520
    assert int(snap.cache_config["num_gpu_blocks"]) * int(snap.cache_config["block_size"]) != (
        1428520
    )
    assert w["kv_max_concurrency"] == pytest.approx(1.3623435238014137)
    assert w["cache_dtype"] == "nvfp4_ds_mla"
    assert w["gpu_memory_utilization"] == pytest.approx(0.835)
    assert "engine" not in snap.cache_config


def test_lmswitch_prefix_cache_hit_rate_is_hits_over_queries() -> None:
    text = capture("lmswitch")
    w = window(None, parse(text), None)
    hits = oracle(text, "vllm:prefix_cache_hits_total")
    queries = oracle(text, "vllm:prefix_cache_queries_total")
    assert w["prefix_cache_hit_rate"] == pytest.approx(hits / queries)
    assert 0.88 < w["prefix_cache_hit_rate"] < 0.89  # "88 % prefix-cache hits" (INDEX.md)


def test_loaded_tp2_capture_reports_queue_and_kv_pressure() -> None:
    text = capture("vllm-benchmarking-fixture_v0.25.1_opt-125m-tp2")
    snap = parse(text)
    w = window(None, snap, None)
    assert (w["requests_running"], w["requests_waiting"]) == (64, 64)
    assert w["kv_cache_usage"] == pytest.approx(oracle(text, "vllm:kv_cache_usage_perc"))
    assert w["kv_capacity_tokens"] == 400448
    assert w["kv_max_concurrency"] == pytest.approx(195.53125)
    assert w["requests_finished"] == 600
    assert w["window_kind"] == "lifetime"
    assert w["generation_tps"] is None  # rates need two scrapes
    assert snap.engines == ["0"]  # TP adds no engine label
    assert w["missing"] == []


def test_v0_capture_reads_kv_usage_from_gpu_cache_usage_perc() -> None:
    snap = parse(capture("aibrix"))
    w = window(None, snap, None)
    assert snap.era == "v0"
    assert "kv_cache_usage" in snap.present
    assert w["kv_cache_usage"] == 0.0
    assert w["requests_running"] == 0
    # V0 reports -1 for a disabled prefix cache: no rate, not a negative one.
    assert w["prefix_cache_hit_rate"] is None
    assert w["kv_capacity_tokens"] == 81767 * 16  # num_gpu_blocks x block_size (no size label)
    assert w["kv_max_concurrency"] is None
    assert (w["prompt_tokens"], w["generation_tokens"], w["requests_finished"]) == (148, 955, 4)


def test_v0_prefix_hit_rate_gauge_is_used_when_enabled() -> None:
    text = bump(capture("aibrix"), "vllm:gpu_prefix_cache_hit_rate", 1.42)  # -1 -> 0.42
    assert window(None, parse(text), None)["prefix_cache_hit_rate"] == pytest.approx(0.42)


def test_early_v1_capture_without_engine_label_still_gives_gauges() -> None:
    snap = parse(capture("production-stack-318"))
    assert snap.era == "v1-early"
    assert snap.gauges == {"kv_cache_usage": 0.0, "requests_running": 0.0, "requests_waiting": 0.0}
    assert snap.model_names == ["Qwen/Qwen2.5-Coder-32B-Instruct"]


def test_v010_capture_prefers_kv_cache_usage_perc_and_never_mixes_prefix_units() -> None:
    text = capture("production-stack-617")
    w = window(None, parse(text), None)
    assert w["kv_cache_usage"] == pytest.approx(9.75010481363281e-06)
    # queries come from the token counter, the only hits counter is the deprecated block one:
    # a hit rate would mix blocks with tokens, so there is none.
    assert w["prefix_cache_hit_rate"] is None
    assert "prefix_cache_hits" in w["missing"]


def test_old_itl_histogram_is_used_only_when_inter_token_latency_is_absent() -> None:
    text = capture("hardware-aware-router")
    new = "vllm:inter_token_latency_seconds_count"
    old = "vllm:time_per_output_token_seconds_count"
    both = observe(text, "vllm:time_per_output_token_seconds", 0.5, 3)
    assert parse(both).histograms["itl"].count == oracle(both, new) == 0
    only_old = "\n".join(line for line in both.splitlines() if "inter_token_latency" not in line)
    assert parse(only_old).histograms["itl"].count == oracle(only_old, old) == 3
    assert parse(only_old).histograms["tpot"].count == 0  # per-request TPOT is its own metric


def test_idle_capture_gives_zero_counts_and_no_percentiles() -> None:
    w = window(None, parse(capture("hardware-aware-router")), None)
    assert (w["requests_finished"], w["generation_tokens"], w["preemptions"]) == (0, 0, 0)
    assert w["ttft_p50_s"] is None and w["itl_p99_s"] is None and w["prompt_len_p50"] is None
    assert w["prefix_cache_hit_rate"] is None
    assert w["missing"] == ["mm_cache_queries"]  # 0.11 predates the multimodal cache counters
    assert w["kv_capacity_tokens"] == 2452 * 16


def test_dp8_spec_decode_capture_sums_engines() -> None:
    text = capture("pr24049")
    snap = parse(text)
    assert snap.engines == [str(i) for i in range(8)]
    assert snap.counters["spec_drafts"] == 22 + 15 + 29 + 20 + 25 + 24 + 27 + 26
    assert snap.per_position_accepted[4] == 2 + 4 + 13 + 6 + 22 + 17
    assert snap.per_position_accepted[3] == 24 + 6
    w = window(None, snap, None)
    # spec metrics exist here, so the absent ones are reported as missing
    assert {"spec_draft_tokens", "spec_accepted_tokens"} <= set(w["missing"])
    assert w["spec_acceptance_rate"] is None


def test_capture_without_spec_decode_does_not_report_spec_metrics_missing() -> None:
    w = window(None, parse(capture("inferstack")), None)
    assert not [name for name in w["missing"] if name.startswith("spec")]
    assert w["spec_drafts"] is None and w["spec_per_position"] is None


def test_partial_ttft_histogram_without_inf_or_count_gives_no_percentile() -> None:
    snap = parse(capture("issue6337"))
    hist = snap.histograms["ttft"]
    assert hist.buckets[0] == (0.001, 208.0) and len(hist.buckets) == 6
    assert window(None, snap, None)["ttft_p50_s"] is None


def test_evoke_capture_gives_ttft_percentiles_and_prefix_rate() -> None:
    text = capture("evoke")
    w = window(None, parse(text), None)
    assert w["prefix_cache_hit_rate"] == pytest.approx(8336 / 78442)
    # 70 requests: rank 35 lies in (0.25, 0.5] which holds 27..39 -> 0.25 + 0.25 * 8/12
    assert w["ttft_p50_s"] == pytest.approx(0.25 + 0.25 * (35 - 27) / (39 - 27))


def test_metal_capture_reports_waiting_requests() -> None:
    w = window(None, parse(capture("vllm-metal")), None)
    assert (w["requests_running"], w["requests_waiting"], w["kv_cache_usage"]) == (0, 6, 0.0)


def test_dp_engines_average_kv_usage_and_sum_queues() -> None:
    text = (
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.2\n'
        'vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.6\n'
        'vllm:num_requests_waiting{engine="0",model_name="m"} 3\n'
        'vllm:num_requests_waiting{engine="1",model_name="m"} 4\n'
    )
    snap = parse(text)
    assert snap.gauges["kv_cache_usage"] == pytest.approx(0.4)
    assert snap.gauges["requests_waiting"] == 7


# --- robustness -------------------------------------------------------------------------------


def test_a_broken_line_loses_only_itself() -> None:
    text = capture("vllm-benchmarking-fixture_v0.25.1_opt-125m-tp2")
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("vllm:num_requests_waiting{"))
    lines.insert(at, 'vllm:num_requests_running{engine="0",model_name="x" 12')
    snap = parse("\n".join(lines))
    assert len(snap.errors) == 1 and f"line {at + 1}" in snap.errors[0]
    assert snap.gauges["requests_running"] == 64 and snap.gauges["requests_waiting"] == 64
    assert snap.counters["request_success"] == 600
    assert window(None, snap, None)["errors"] == snap.errors


def test_garbage_input_returns_an_empty_snapshot_with_reasons() -> None:
    for junk in (None, 42, b"\xff\xfe vllm:x{", "", "not prometheus at all\n\x00"):
        snap = parse(junk)
        assert isinstance(snap, MetricSnapshot)
        assert snap.era == "unknown" and snap.counters == {}
    assert parse(None).errors == ["expected str, got NoneType"]
    w = window(None, parse(""), None)
    assert "kv_cache_usage" in w["missing"] and w["kv_cache_usage"] is None


def test_bytes_and_underscore_prefixed_names_are_accepted() -> None:
    text = b'vllm_num_requests_running{engine="0",model_name="m"} 5\n'
    assert parse(text).gauges["requests_running"] == 5


def test_repeated_series_counts_once_and_non_finite_values_are_reported() -> None:
    text = (
        'vllm:prompt_tokens_total{engine="0",model_name="m"} 10\n'
        'vllm:prompt_tokens_total{engine="0",model_name="m"} 10\n'
        'vllm:generation_tokens_total{engine="0",model_name="m"} NaN\n'
    )
    snap = parse(text)
    assert snap.counters == {"prompt_tokens": 10}
    assert any("non-finite" in e for e in snap.errors)


def test_help_and_type_lines_and_created_samples_are_ignored() -> None:
    text = (
        "# HELP vllm:num_preemptions Cumulative number of preemption\n"
        "# TYPE vllm:num_preemptions counter\n"
        'vllm:num_preemptions_total{engine="0",model_name="m"} 7.0\n'
        'vllm:num_preemptions_created{engine="0",model_name="m"} 1.7e9\n'
    )
    assert parse(text).counters == {"preemptions": 7}


# --- two-scrape windows built from a real capture --------------------------------------------


def loaded() -> str:
    return capture("vllm-benchmarking-fixture_v0.25.1_opt-125m-tp2")


def test_delta_window_gives_token_rates_and_finished_requests() -> None:
    prev_text = loaded()
    cur_text = bump(prev_text, "vllm:generation_tokens_total", 3000)
    cur_text = bump(cur_text, "vllm:prompt_tokens_total", 12000)
    cur_text = bump(cur_text, "vllm:request_success_total", 30, 'finished_reason="length"')
    cur_text = bump(cur_text, "vllm:num_preemptions_total", 2)
    w = window(parse(prev_text), parse(cur_text), 10.0)
    assert (w["window_kind"], w["window_s"], w["counter_reset"]) == ("delta", 10.0, False)
    assert w["generation_tps"] == pytest.approx(300.0)
    assert w["prompt_tps"] == pytest.approx(1200.0)
    assert (w["requests_finished"], w["preemptions"]) == (30, 2)
    assert w["preemptions_per_s"] == pytest.approx(0.2)


def test_delta_window_percentiles_come_from_bucket_deltas() -> None:
    prev_text = loaded()
    cur_text = observe(prev_text, "vllm:time_to_first_token_seconds", 0.3, 90)
    cur_text = observe(cur_text, "vllm:time_to_first_token_seconds", 3.0, 10)
    w = window(parse(prev_text), parse(cur_text), 30.0)
    # window holds 90 obs in (0.25, 0.5] and 10 in (2.5, 5.0]
    assert w["ttft_p50_s"] == pytest.approx(0.25 + 0.25 * 50 / 90)
    assert w["ttft_p99_s"] == pytest.approx(2.5 + 2.5 * 9 / 10)
    lifetime = window(None, parse(cur_text), None)
    assert lifetime["ttft_p50_s"] < 0.25  # 664 earlier fast requests dominate the lifetime


def test_counter_reset_falls_back_to_lifetime() -> None:
    before = bump(loaded(), "vllm:generation_tokens_total", 50000)
    after = loaded()  # fewer tokens than before: the process restarted between scrapes
    w = window(parse(before), parse(after), 60.0)
    assert (w["window_kind"], w["counter_reset"], w["window_s"]) == ("lifetime", True, None)
    assert w["generation_tokens"] == 165293
    assert w["generation_tps"] is None
    lifetime = window(None, parse(after), None)
    assert {k: v for k, v in w.items() if k != "counter_reset"} == {
        k: v for k, v in lifetime.items() if k != "counter_reset"
    }


def test_collapsed_last_window_shows_while_lifetime_stays_healthy() -> None:
    prev_text = loaded()
    cur_text = observe(prev_text, "vllm:time_to_first_token_seconds", 30.0, 50)
    cur_text = observe(cur_text, "vllm:e2e_request_latency_seconds", 90.0, 50)
    cur_text = bump(cur_text, "vllm:request_success_total", 50, 'finished_reason="length"')
    cur_text = bump(cur_text, "vllm:generation_tokens_total", 600)
    last = window(parse(prev_text), parse(cur_text), 300.0)
    lifetime = window(None, parse(cur_text), None)
    assert 20.0 < last["ttft_p50_s"] <= 40.0
    assert lifetime["ttft_p50_s"] < 0.5
    assert last["e2e_p50_s"] > 60 > lifetime["e2e_p50_s"]
    assert last["generation_tps"] == pytest.approx(2.0)


def test_zero_traffic_window_gives_zero_rates_and_no_percentiles_or_ratios() -> None:
    text = capture("vllm-benchmarking-fixture_v0.25.1_opt-125m-ngram3")
    w = window(parse(text), parse(text), 60.0)
    assert (w["generation_tps"], w["prompt_tps"], w["preemptions_per_s"]) == (0.0, 0.0, 0.0)
    assert (w["requests_finished"], w["spec_drafts"], w["mm_items"]) == (0, 0, 0)
    for key in ("ttft_p50_s", "tpot_p99_s", "itl_p50_s", "prompt_len_p50"):
        assert w[key] is None, key
    for key in ("spec_acceptance_rate", "spec_mean_acceptance_length", "prefix_cache_hit_rate"):
        assert w[key] is None, key
    assert w["spec_per_position"] is None


def test_spec_decode_window_uses_counter_deltas() -> None:
    prev_text = capture("lmswitch")
    cur_text = bump(prev_text, "vllm:spec_decode_num_drafts_total", 100)
    cur_text = bump(cur_text, "vllm:spec_decode_num_draft_tokens_total", 600)
    cur_text = bump(cur_text, "vllm:spec_decode_num_accepted_tokens_total", 150)
    cur_text = bump(cur_text, "vllm:spec_decode_num_accepted_tokens_per_pos_total", 60,
                    'position="0"')  # fmt: skip
    cur_text = bump(cur_text, "vllm:spec_decode_num_accepted_tokens_per_pos_total", 90,
                    'position="1"')  # fmt: skip
    w = window(parse(prev_text), parse(cur_text), 5.0)
    assert w["spec_acceptance_rate"] == pytest.approx(0.25)
    assert w["spec_mean_acceptance_length"] == pytest.approx(2.5)
    assert w["spec_per_position"] == pytest.approx([0.6, 0.9, 0.0, 0.0, 0.0, 0.0])


def test_delta_window_without_elapsed_time_gives_counts_but_no_rates() -> None:
    prev_text = loaded()
    cur_text = bump(prev_text, "vllm:generation_tokens_total", 100)
    for elapsed in (None, 0.0, -5.0, math.nan):
        w = window(parse(prev_text), parse(cur_text), elapsed)
        assert w["window_kind"] == "delta" and w["window_s"] is None
        assert w["generation_tokens"] == 100 and w["generation_tps"] is None


def test_counter_absent_from_the_previous_scrape_has_no_delta() -> None:
    text = loaded()
    prev_text = "\n".join(ln for ln in text.splitlines() if "prompt_tokens_total" not in ln)
    w = window(parse(prev_text), parse(text), 10.0)
    assert w["prompt_tokens"] is None and w["prompt_tps"] is None
    assert w["generation_tokens"] == 0


def test_changed_bucket_layout_gives_no_percentile() -> None:
    text = loaded()
    prev_text = "\n".join(ln for ln in text.splitlines() if 'le="0.001"' not in ln)
    cur_text = observe(text, "vllm:time_to_first_token_seconds", 0.3, 5)
    w = window(parse(prev_text), parse(cur_text), 10.0)
    assert w["ttft_p50_s"] is None
    assert w["e2e_p50_s"] is None  # unchanged layout, but no traffic in the window


# --- histogram_quantile semantics -------------------------------------------------------------


def hist(*buckets: tuple[float, float], count: float | None = None) -> Histogram:
    return Histogram(buckets=list(buckets), sum=None, count=count)


def test_quantile_interpolates_inside_the_bucket_from_zero_for_the_first() -> None:
    h = hist((1.0, 10), (2.0, 20), (math.inf, 20))
    assert histogram_quantile(0.25, h) == pytest.approx(0.5)
    assert histogram_quantile(0.75, h) == pytest.approx(1.5)


def test_quantile_in_the_inf_bucket_returns_the_largest_finite_bound() -> None:
    h = hist((1.0, 1), (5.0, 2), (math.inf, 10))
    assert histogram_quantile(0.99, h) == 5.0


def test_quantile_is_none_for_empty_or_totalless_histograms() -> None:
    assert histogram_quantile(0.5, hist((1.0, 0), (math.inf, 0))) is None
    assert histogram_quantile(0.5, hist((1.0, 4))) is None
    assert histogram_quantile(0.5, hist((1.0, 4), count=4)) == pytest.approx(0.5)
    assert histogram_quantile(0.5, None) is None
    assert histogram_quantile(1.5, hist((1.0, 4), (math.inf, 4))) is None


def test_quantile_tolerates_non_monotonic_buckets_like_promql() -> None:
    h = hist((1.0, 10), (2.0, 8), (3.0, 20), (math.inf, 20))
    assert histogram_quantile(0.5, h) == pytest.approx(1.0)
    assert histogram_quantile(0.75, h) == pytest.approx(2.5)


def test_a_snapshot_kept_as_json_gives_the_same_window_as_the_parsed_text():
    for path in sorted(CASES.glob("*.prom")):
        snap = parse(path.read_text())
        kept = MetricSnapshot.from_json(json.loads(json.dumps(snap.to_json(), allow_nan=False)))
        assert kept == snap, path.name
        assert window(kept, snap, 30.0) == window(snap, snap, 30.0), path.name
