"""audit.kb.context: one context per server, for every shared case and the seed recipes."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from casekit import all_case_paths, case_id, case_to_report, seed_report, seed_template
from hypothesis import given, settings
from hypothesis import strategies as st

from audit.kb.context import build_context, build_contexts

TOP_KEYS = {"vllm", "flags", "flags_meta", "model", "gpu", "template", "metrics", "geometry",
            "host"}
VLLM_KEYS = {"version", "version_raw", "version_note", "is_prerelease", "is_nightly",
             "installed", "pending_upgrade", "previous", "version_changed", "restarted",
             "restarted_without_change", "restarts", "newer_than_vetted"}
FLAG_KEYS = {"model", "served_model_name", "tensor_parallel_size", "pipeline_parallel_size",
             "data_parallel_size", "max_model_len", "gpu_memory_utilization", "max_num_seqs",
             "max_num_batched_tokens", "kv_cache_dtype", "quantization", "dtype",
             "enforce_eager", "attention_backend", "reasoning_parser", "tool_call_parser",
             "enable_auto_tool_choice", "chat_template", "revision", "trust_remote_code",
             "enable_prefix_caching", "enable_chunked_prefill", "performance_mode",
             "async_scheduling", "language_model_only", "limit_mm_per_prompt",
             "speculative_config", "default_chat_template_kwargs", "disable_log_stats",
             "block_size", "port", "host", "uds", "api_server_count", "cpu_offload_gb",
             "swap_space", "enable_lora"}
META_KEYS = {"set", "sources", "unknown", "removed", "launcher", "container_image", "errors"}
MODEL_KEYS = {"id", "family", "is_gemma4", "quantization", "is_int4", "multimodal",
              "speculative", "geometry"}
SPEC_KEYS = {"method", "model", "num_speculative_tokens", "parallel_drafting",
             "draft_tensor_parallel_size"}
GPU_KEYS = {"count", "name", "known", "memory_gib", "bandwidth_tbs", "compute_capability", "cc",
            "arch", "fp8", "fp4", "unified_memory", "bandwidth_knee_max_num_seqs",
            "per_server_count"}
TEMPLATE_KEYS = {"sha256", "size_bytes", "source", "identity", "label", "pulled"}
GEOMETRY_KEYS = {"known", "layers", "sliding_layers", "global_layers", "kv_heads",
                 "global_kv_heads", "head_dim", "global_head_dim", "sliding_window",
                 "max_position_embeddings", "weight_gib", "kv_bytes_per_token_global",
                 "kv_bytes_per_token_sliding", "single_request_max_tokens_estimate",
                 "num_attention_heads"}
METRIC_KEYS = {"available", "lifetime", "era", "model_names", "window_kind",
               "spec_acceptance_rate", "kv_cache_usage"}
HOST_KEYS = {"hostname", "machine_id", "labels", "gpu_count", "driver", "cuda"}


def get(ctx: dict[str, Any], dotted: str) -> Any:
    for part in dotted.split("."):
        ctx = ctx[part]
    return ctx


def assert_contract(ctx: dict[str, Any]) -> None:
    assert set(ctx) >= TOP_KEYS
    for block, keys in (("vllm", VLLM_KEYS), ("flags", FLAG_KEYS), ("flags_meta", META_KEYS),
                        ("model", MODEL_KEYS), ("gpu", GPU_KEYS), ("template", TEMPLATE_KEYS),
                        ("geometry", GEOMETRY_KEYS), ("metrics", METRIC_KEYS),
                        ("host", HOST_KEYS)):
        missing = keys - set(ctx[block])
        assert not missing, f"{block} lacks {missing}"
    assert set(ctx["model"]["speculative"]) >= SPEC_KEYS
    json.dumps(ctx)  # plain JSON-able


# What a rule needs from each case, read off the case file (version, argv, GPUs, notes).
CASE_EXPECTATIONS: dict[str, dict[str, Any]] = {
    "002": {"vllm.version": "0.20.2rc1.dev49", "vllm.is_prerelease": True,
            "flags_meta.container_image": "vllm/vllm-openai:gemma4-0505-cu130",
            "model.family": "gemma4-31b", "model.quantization": "awq", "model.is_int4": True,
            "model.speculative.method": "mtp", "model.speculative.num_speculative_tokens": 4,
            "flags.kv_cache_dtype": "fp8", "gpu.compute_capability": "12.0",
            "template.identity": "frozen", "model.multimodal": False,
            "flags.performance_mode": "throughput"},
    "003": {"vllm.version": "0.23.1rc1.dev925", "model.quantization": "nvfp4",
            "model.speculative.method": "mtp", "model.speculative.num_speculative_tokens": 6,
            "gpu.cc": 10.0, "gpu.arch": "blackwell", "flags.attention_backend": None,
            "flags.enable_prefix_caching": False},
    "004": {"vllm.version": "0.19.2rc1.dev25", "model.family": "gemma4-26b-a4b",
            "model.quantization": "fp8", "flags.tensor_parallel_size": 2,
            "flags.language_model_only": True, "model.multimodal": False,
            "flags.served_model_name": "my_model", "gpu.known": False},
    "005": {"vllm.version": "0.26.0", "model.family": "gemma4-26b-a4b",
            "flags.tool_call_parser": "gemma4", "flags.max_model_len": 131072,
            "flags.dtype": "bfloat16", "gpu.vendor": "amd"},
    "006": {"flags.pipeline_parallel_size": 2, "flags.max_model_len": 262144,
            "flags_meta.sources.max_model_len":
                "default (model max_position_embeddings, models.yaml)",
            "gpu.heterogeneous": True, "gpu.min_memory_gib": 16.0, "model.family": "qwen3"},
    "009": {"vllm.version": "0.8.5.post1", "flags.tensor_parallel_size": 3,
            "model.family": "gemma3", "geometry.num_attention_heads": 32,
            "geometry.kv_heads": 16},
    "010": {"vllm.version": "0.8.1", "flags_meta.launcher": "api_server module",
            "flags.max_num_seqs": 1024, "model.quantization": "gptq",
            "flags.tensor_parallel_size": 2},
    "011": {"vllm.version": "0.8.2", "flags_meta.launcher": "unknown", "model.id": None,
            "flags.max_num_seqs": 1024, "gpu.name": "NVIDIA GeForce RTX 4090",
            "flags.gpu_memory_utilization": 0.95},
    "012": {"model.family": "gemma4-31b", "model.quantization": "awq", "model.multimodal": True,
            "flags.limit_mm_per_prompt": {"image": 1}},
    "015": {"vllm.version": "0.8.5", "model.family": "deepseek", "flags.kv_cache_dtype": "fp8",
            "flags.tensor_parallel_size": 8, "gpu.cc": 9.0},
    "016": {"vllm.version": "0.6.3", "model.family": "mllama", "model.multimodal": True,
            "flags.max_num_seqs": 256, "gpu.arch": "ampere"},
    "017": {"vllm.version": "0.23.0", "model.family": "gemma4-12b",
            "model.speculative.method": "mtp", "gpu.vendor": "huawei", "gpu.cc": None,
            "metrics.spec_acceptance_rate": 0.0, "metrics.available": True},
    "018": {"vllm.version": "0.20.1", "model.speculative.method": "mtp",
            "model.speculative.model": "google/gemma-4-31B-it-assistant",
            "model.quantization": "bf16", "flags.tensor_parallel_size": 2},
    "019": {"vllm.version": "0.22.0", "model.family": "gemma4-12b",
            "model.quantization": "qat-w4a16", "model.is_int4": True, "gpu.cc": 8.9},
    "021": {"vllm.version": "0.9.0", "flags_meta.container_image": "vllm/vllm-openai:latest",
            "gpu.cc": 12.0, "model.quantization": "awq"},
    "022": {"vllm.version": "0.11.0", "flags.tool_call_parser": "hermes",
            "model.family": "qwen3"},
    "023": {"vllm.version": "0.10.0", "flags.reasoning_parser": "qwen3",
            "flags_meta.container_image": "vllm/vllm-openai:v0.10.0"},
    "024": {"vllm.version": "0.18.0", "flags.tensor_parallel_size": 4,
            "model.speculative.method": None, "flags.speculative_config": None,
            "flags_meta.placeholders": ["speculative_config"]},
    "027": {"vllm.version": "0.17.1", "model.id": None, "model.speculative.method": "eagle3",
            "gpu.name": "NVIDIA H200", "gpu.bandwidth_knee_max_num_seqs": 128,
            "metrics.spec_mean_acceptance_length": 2.8},
    "028": {"vllm.version": "0.13", "model.speculative.method": "mtp",
            "model.speculative.num_speculative_tokens": 1, "model.quantization": "fp8",
            "gpu.cc": 12.0},
    "029": {"vllm.version": "0.28.1rc1.dev130", "model.quantization": "nvfp4", "gpu.cc": 8.0,
            "gpu.fp8": False, "flags.tensor_parallel_size": 16,
            "flags.pipeline_parallel_size": 2},
    "031": {"flags.data_parallel_size": 8, "flags.max_model_len": 262144, "gpu.cc": 9.0,
            "model.quantization": "fp8", "flags.gpu_memory_utilization": 0.9},
    "032": {"model.family": "gemma4-26b-a4b", "model.quantization": "fp8",
            "model.speculative.method": "mtp", "flags.kv_cache_dtype": "fp8",
            "gpu.cc": 8.9, "model.multimodal": False,
            "flags.default_chat_template_kwargs": {"enable_thinking": False}},
    "034": {"vllm.version": "0.8.3", "model.family": "qwen2.5-vl",
            "flags.gpu_memory_utilization": 0.95, "gpu.memory_gib": 40.0,
            "flags.max_num_seqs": 2},
    "036": {"vllm.version": "0.19.2rc1.dev134", "gpu.cc": 12.1, "gpu.unified_memory": True,
            "flags_meta.container_image": "vllm/vllm-openai:nightly", "flags.enforce_eager": True},
    "038": {"vllm.version": "0.6.4.post1", "flags.gpu_memory_utilization": 0.98,
            "flags.enable_lora": True, "gpu.cc": 7.0, "flags_meta.removed": [],
            "flags_meta.launcher": "api_server module"},
    "040": {"vllm.version": "0.22.0", "model.family": "gemma4-26b-a4b",
            "flags.chat_template": "examples/tool_chat_template_gemma4.jinja",
            "gpu.cc": 12.0, "model.multimodal": True},
}
SERVERLESS = {"008"}  # a `vllm bench` line is not a server


@pytest.mark.parametrize("path", all_case_paths(), ids=case_id)
def test_every_case_builds_a_complete_context_with_what_rules_need(path) -> None:
    cid = case_id(path)
    report = case_to_report(path)
    if cid in SERVERLESS:
        assert report["servers"] == []
        return
    contexts = build_contexts(report, [])
    assert len(contexts) == 1
    ctx = contexts[0]
    assert_contract(ctx)
    assert cid in CASE_EXPECTATIONS, f"add expectations for case {cid}"
    for dotted, expected in CASE_EXPECTATIONS[cid].items():
        value = get(ctx, dotted)
        if isinstance(expected, float) and value is not None:
            assert value == pytest.approx(expected, rel=1e-3), dotted
        else:
            assert value == expected, f"case {cid}: {dotted} = {value!r}"


def test_a_bench_case_can_still_be_evaluated_for_its_flags() -> None:
    path = next(p for p in all_case_paths() if case_id(p) == "008")
    report = case_to_report(path, include_bench=True)
    ctx = build_context(report["servers"][0], report)
    assert ctx["flags_meta"]["is_server"] is False
    assert ctx["flags"]["kv_cache_dtype"] == "fp8" and ctx["flags"]["enforce_eager"] is True
    # VLLM_ATTENTION_BACKEND in the case env forces the backend argv left unset
    assert ctx["flags"]["attention_backend"] == "FLASHINFER"
    assert ctx["flags_meta"]["sources"]["attention_backend"] == "env VLLM_ATTENTION_BACKEND"
    assert ctx["gpu"]["cc"] == 9.0


def test_an_explicit_attention_backend_flag_beats_the_environment() -> None:
    report = seed_report("LIGHT")
    server = report["servers"][0]
    server["env"] = {"VLLM_ATTENTION_BACKEND": "FLASHINFER"}
    server["argv"] += ["--attention-backend", "TRITON_ATTN"]
    ctx = build_context(server, report)
    assert ctx["flags"]["attention_backend"] == "TRITON_ATTN"
    assert ctx["flags_meta"]["env_overrides"] == []


@pytest.mark.parametrize(("recipe", "tp", "util", "seqs", "knee_server"), [
    ("LIGHT", 1, 0.85, 64, 64), ("PUSH", 2, 0.94, 256, 128)])
def test_seed_recipes_give_the_values_the_seed_rules_read(recipe, tp, util, seqs,
                                                          knee_server) -> None:
    report = seed_report(recipe)
    ctx = build_context(report["servers"][0], report)
    assert_contract(ctx)
    assert ctx["vllm"]["version"] == "0.25.1" and ctx["vllm"]["pending_upgrade"] is False
    assert ctx["flags"]["tensor_parallel_size"] == tp
    assert ctx["flags"]["gpu_memory_utilization"] == util
    assert ctx["flags"]["max_num_seqs"] == seqs
    assert ctx["model"]["family"] == "gemma4-31b" and ctx["model"]["is_gemma4"]
    assert ctx["model"]["quantization"] == "awq" and ctx["model"]["is_int4"]
    spec = ctx["model"]["speculative"]
    assert (spec["method"], spec["num_speculative_tokens"], spec["parallel_drafting"]) == \
        ("eagle3", 3, False)
    assert ctx["gpu"]["compute_capability"] == "9.0" and ctx["gpu"]["per_server_count"] == tp
    assert ctx["gpu"]["bandwidth_knee_max_num_seqs"] == 64
    assert ctx["gpu"]["bandwidth_knee_server"] == knee_server
    assert ctx["template"]["identity"] == "vetted"
    assert ctx["flags"]["default_chat_template_kwargs"] == {"enable_thinking": True}
    assert ctx["geometry"]["single_request_max_tokens_estimate"] >= ctx["flags"]["max_model_len"]
    assert ctx["model"]["multimodal"] is True  # recipe does not disable image input


def test_light_and_push_kv_estimates_bracket_the_seed_figures() -> None:
    light = build_context(*_first(seed_report("LIGHT")))["geometry"]
    push = build_context(*_first(seed_report("PUSH")))["geometry"]
    assert 72_000 < light["kv_capacity_tokens_estimate"] < 98_000  # seed: ~85K
    assert 207_000 < push["kv_capacity_tokens_estimate"] < 281_000  # seed: 244K
    assert push["single_request_max_tokens_estimate"] >= 262144


def _first(report: dict) -> tuple[dict, dict]:
    return report["servers"][0], report


def _later(report: dict, *, pid: int | None = None, version: str | None = None,
           argv: list[str] | None = None, metrics: str | None = None,
           collected_at: str = "2026-09-30T12:05:00+00:00") -> dict:
    nxt = copy.deepcopy(report)
    nxt["collected_at"] = collected_at
    server = nxt["servers"][0]
    if pid is not None:
        server["pid"], server["started_at"] = pid, "2026-09-30T12:04:00+00:00"
    if version is not None:
        server["vllm_version"] = server["installed_vllm_version"] = version
    if argv is not None:
        server["argv"] = argv
    if metrics is not None:
        server["metrics"] = {"format": "prometheus-text", "scraped_at": collected_at,
                             "text": metrics}
    return nxt


def test_a_restart_with_the_same_config_is_restarted_without_change() -> None:
    first = seed_report("LIGHT")
    second = _later(first, pid=5555)
    vllm = build_context(*_first(second), history=[first])["vllm"]
    assert vllm["restarted"] is True and vllm["restarted_without_change"] is True
    assert vllm["restarts"] == 1 and vllm["version_changed"] is False
    assert vllm["previous"] == "0.25.1"


def test_an_upgrade_restart_is_a_version_change_not_an_unexplained_restart() -> None:
    first = seed_report("LIGHT")
    second = _later(first, pid=5555, version="0.26.0")
    vllm = build_context(*_first(second), history=[first])["vllm"]
    assert vllm["version_changed"] is True and vllm["previous"] == "0.25.1"
    assert vllm["restarted"] is True and vllm["restarted_without_change"] is False


def test_restarts_are_counted_across_history() -> None:
    first = seed_report("PUSH")
    second = _later(first, pid=2)
    third = _later(second, pid=3, collected_at="2026-09-30T12:10:00+00:00")
    assert build_context(*_first(third), history=[first, second])["vllm"]["restarts"] == 2


def test_a_pending_upgrade_is_an_installed_version_that_is_not_running() -> None:
    report = seed_report("LIGHT")
    report["servers"][0]["installed_vllm_version"] = "0.26.0"
    vllm = build_context(*_first(report))["vllm"]
    assert vllm["pending_upgrade"] is True and vllm["installed"] == "0.26.0"


def _spec_text(drafts: int, accepted: int, prompt: int) -> str:
    base = 'model_name="m",engine="0"'
    return "\n".join([
        f"vllm:spec_decode_num_drafts_total{{{base}}} {drafts}",
        f"vllm:spec_decode_num_draft_tokens_total{{{base}}} {drafts * 3}",
        f"vllm:spec_decode_num_accepted_tokens_total{{{base}}} {accepted}",
        f"vllm:prompt_tokens_total{{{base}}} {prompt}",
        f"vllm:kv_cache_usage_perc{{{base}}} 0.5", ""])


def test_the_window_is_a_delta_against_the_same_process_and_lifetime_is_kept() -> None:
    first = seed_report("PUSH", metrics=_spec_text(1000, 2400, 100_000))
    second = _later(first, metrics=_spec_text(2000, 2700, 160_000))
    metrics = build_context(*_first(second), history=[first])["metrics"]
    assert metrics["window_kind"] == "delta" and metrics["window_s"] == pytest.approx(300)
    assert metrics["spec_acceptance_rate"] == pytest.approx(300 / 3000)
    assert metrics["prompt_tps"] == pytest.approx(60_000 / 300)
    assert metrics["lifetime"]["spec_acceptance_rate"] == pytest.approx(2700 / 6000)


def test_after_a_restart_the_window_is_the_new_process_lifetime() -> None:
    first = seed_report("PUSH", metrics=_spec_text(1000, 2400, 100_000))
    second = _later(first, pid=77, metrics=_spec_text(10, 3, 500))
    metrics = build_context(*_first(second), history=[first])["metrics"]
    assert metrics["window_kind"] == "lifetime"
    assert metrics["spec_acceptance_rate"] == pytest.approx(3 / 30)


def test_no_metrics_text_means_unavailable_not_healthy() -> None:
    ctx = build_context(*_first(seed_report("LIGHT")))
    assert ctx["metrics"]["available"] is False
    assert ctx["metrics"]["spec_acceptance_rate"] is None


def test_version_falls_back_to_the_container_tag_when_version_is_unreachable() -> None:
    report = seed_report("LIGHT", version=None)
    report["servers"][0]["container_image"] = "vllm/vllm-openai:v0.27.0"
    vllm = build_context(*_first(report))["vllm"]
    assert vllm["version"] == "0.27.0" and "container image" in vllm["version_note"]


def test_gpus_not_held_by_the_server_are_ignored() -> None:
    report = seed_report("PUSH")
    report["gpus"].append({**report["gpus"][0], "uuid": "GPU-other", "name": "NVIDIA L4"})
    ctx = build_context(*_first(report))
    assert ctx["gpu"]["count"] == 3 and ctx["gpu"]["per_server_count"] == 2
    assert ctx["host"]["gpu_count"] == 3


def test_max_model_len_from_v1_models_wins_over_the_model_default() -> None:
    report = seed_report("LIGHT")
    server = report["servers"][0]
    server["argv"] = [a for a in server["argv"]]
    index = server["argv"].index("--max-model-len")
    del server["argv"][index:index + 2]
    server["models"] = [{"id": "x", "root": "x", "max_model_len": 65536}]
    ctx = build_context(server, report)
    assert ctx["flags"]["max_model_len"] == 65536
    assert ctx["flags_meta"]["sources"]["max_model_len"].startswith("GET /v1/models")


def test_text_only_limits_turn_multimodal_off() -> None:
    report = seed_report("LIGHT")
    report["servers"][0]["argv"] += ["--limit-mm-per-prompt", '{"image": 0, "audio": 0}']
    assert build_context(*_first(report))["model"]["multimodal"] is False


def test_an_empty_server_entry_still_gives_every_key() -> None:
    report = {"host": {}, "gpus": [], "servers": [{}]}
    ctx = build_contexts(report)[0]
    assert_contract(ctx)
    assert ctx["vllm"]["version"] is None and ctx["model"]["family"] is None


def test_seed_template_helper_matches_the_table() -> None:
    for identity in ("frozen", "intermediate", "vetted"):
        report = seed_report("LIGHT")
        report["servers"][0]["chat_template"] = seed_template(identity)
        assert build_context(*_first(report))["template"]["identity"] == identity


@settings(max_examples=200, deadline=None)
@given(argv=st.lists(st.sampled_from([
    "vllm", "serve", "google/gemma-4-31B-it", "-tp", "0", "3", "--pipeline-parallel-size",
    "x", "--gpu-memory-utilization", "1.5", "--kv-cache-dtype", "nvfp4", "--max-model-len",
    "auto", "--limit-mm-per-prompt", '{"image": {"count": 0}}', "-sc", "<gone>",
    "--speculative-config.method", "eagle3", "--language-model-only", "--served-model-name",
    "--speculative-config.model", "5", "-q", "awq", "--dtype", "--quantization", "<q>",
    "--max-num-batched-tokens", "1k", "--block-size"]), max_size=14),
    text=st.one_of(st.none(), st.text(max_size=40)))
def test_build_context_never_raises_and_keeps_the_contract(argv, text) -> None:
    report = seed_report("PUSH")
    server = report["servers"][0]
    server["argv"] = argv
    server["metrics"] = None if text is None else {"text": text, "scraped_at": "bad"}
    assert_contract(build_context(server, report, history=[seed_report("PUSH")]))
