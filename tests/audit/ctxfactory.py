"""Hand-built rule contexts that follow docs/knowledge-base.md exactly (every key present).

Shared by the rule tests: ``make_context("light", {"vllm.version": "0.26.0"})`` returns a
complete context for the seed's LIGHT recipe (seed 000 "Operating-point recipes") with the
dotted keys overridden. Presets: ``"light"`` (1x H100 80GB HBM3, TP=1), ``"push"``
(2x H100, TP=2) and ``"plain"`` (a non-Gemma 8B model on one L40S, no speculator).
``window(**values)`` builds a metrics window with every key present (None unless given).
"""

from __future__ import annotations

import copy
from typing import Any

from audit.kb.invariants import unjudged
from audit.kb.probes import probes_block
from audit.kb.template_parsers import hybrid_thinking, parser_check

WINDOW_KEYS = (
    "window_kind", "window_s", "kv_cache_usage", "requests_running", "requests_waiting",
    "preemptions", "preemptions_per_s", "prompt_tps", "generation_tps", "requests_finished",
    "ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "itl_p50_s", "itl_p99_s",
    "e2e_p50_s", "queue_p50_s", "prompt_len_p50", "prompt_len_p90", "prompt_len_p99",
    "prefix_cache_hit_rate", "mm_items", "spec_drafts", "spec_draft_tokens",
    "spec_accepted_tokens", "spec_acceptance_rate", "spec_mean_acceptance_length",
    "spec_per_position", "kv_capacity_tokens", "kv_max_concurrency", "cache_dtype",
    "gpu_memory_utilization",
)

# Seed 000 "Three load-bearing facts" #3: the vetted canonical template is
# ae53464b…8de4c6d4 (18683 bytes); the middle of the hash is not in the seed.
VETTED_SHA = "ae53464b" + "0" * 48 + "8de4c6d4"
EAGLE3_31B = "RedHatAI/gemma-4-31B-it-speculator.eagle3"


def window(**values: Any) -> dict[str, Any]:
    """A metrics window dict with every key of metrics.window(); ``missing``/``errors`` []."""
    out: dict[str, Any] = {key: None for key in WINDOW_KEYS}
    out.update({"missing": [], "errors": [], "start": None,
                "invariants": unjudged("factory window: no previous scrape")})
    out.update(values)
    return out


def _healthy_window(running: int, concurrency: float, capacity: int) -> dict[str, Any]:
    return window(
        window_kind="delta", window_s=300.0, kv_cache_usage=0.45, requests_running=running,
        requests_waiting=0, preemptions=0, preemptions_per_s=0.0, prompt_tps=2800.0,
        generation_tps=400.0, requests_finished=900, ttft_p50_s=0.9, ttft_p99_s=4.0,
        tpot_p50_s=0.12, tpot_p99_s=0.2, itl_p50_s=0.05, itl_p99_s=0.15, e2e_p50_s=30.0,
        queue_p50_s=0.01, prompt_len_p50=3000, prompt_len_p90=4000, prompt_len_p99=4096,
        prefix_cache_hit_rate=0.2, mm_items=0, spec_drafts=20000, spec_draft_tokens=60000,
        spec_accepted_tokens=33000, spec_acceptance_rate=0.55,
        spec_mean_acceptance_length=2.65, spec_per_position=[0.75, 0.55, 0.35],
        kv_capacity_tokens=capacity, kv_max_concurrency=concurrency, cache_dtype="fp8",
        gpu_memory_utilization=None,
    )


def _metrics(running: int, concurrency: float, capacity: int) -> dict[str, Any]:
    live = _healthy_window(running, concurrency, capacity)
    lifetime = {**live, "window_kind": "lifetime", "window_s": None,
                "prompt_tps": None, "generation_tps": None}
    return {**live, "available": True, "lifetime": lifetime, "era": "v1",
            "model_names": ["cyankiwi/gemma-4-31B-it-AWQ-4bit"]}


def _gemma4_31b_geometry(estimate: int) -> dict[str, Any]:
    # vllm-facts 6.1 (31B text config); KV bytes per token at fp8 (6.3), TP=1.
    return {
        "known": True, "layers": 60, "sliding_layers": 50, "global_layers": 10,
        "kv_heads": 16, "global_kv_heads": 4, "head_dim": 256, "global_head_dim": 512,
        "sliding_window": 1024, "max_position_embeddings": 262144, "weight_gib": 19.0,
        "kv_bytes_per_token_global": 40960, "kv_bytes_per_token_sliding": 409600,
        "single_request_max_tokens_estimate": estimate, "num_attention_heads": 32,
        # LIGHT on one H100 at fp8: the seed's ~85K tokens of KV (R1).
        "kv_capacity_tokens_estimate": 85000, "max_concurrency_estimate": None,
    }


def _h100(count: int) -> dict[str, Any]:
    return {
        "count": count, "name": "NVIDIA H100 80GB HBM3", "known": True, "memory_gib": 79.6,
        "bandwidth_tbs": 3.35, "compute_capability": "9.0", "cc": 9.0, "arch": "hopper",
        "fp8": True, "fp4": False, "unified_memory": False,
        "bandwidth_knee_max_num_seqs": 64, "per_server_count": count,
    }


def _light() -> dict[str, Any]:
    """Seed 000 LIGHT recipe on vLLM 0.25.1, vetted template, enable_thinking server-side."""
    model_id = "cyankiwi/gemma-4-31B-it-AWQ-4bit"
    spec = {"method": "eagle3", "model": EAGLE3_31B, "num_speculative_tokens": 3}
    geometry = _gemma4_31b_geometry(estimate=320000)
    argv_set = ["model", "tensor_parallel_size", "max_model_len", "gpu_memory_utilization",
                "max_num_seqs", "max_num_batched_tokens", "kv_cache_dtype", "chat_template",
                "enable_auto_tool_choice", "reasoning_parser", "tool_call_parser",
                "speculative_config", "default_chat_template_kwargs"]
    return {
        "vllm": {
            "version": "0.25.1", "version_raw": "0.25.1", "version_note": "release",
            "is_prerelease": False, "is_nightly": False, "installed": "0.25.1",
            "pending_upgrade": False, "previous": None, "version_changed": False,
            "restarted": False, "restarted_without_change": False, "restarts": 0,
            "newer_than_vetted": False,
        },
        "flags": {
            "model": model_id, "served_model_name": None, "tensor_parallel_size": 1,
            "pipeline_parallel_size": 1, "data_parallel_size": 1, "max_model_len": 32768,
            "gpu_memory_utilization": 0.85, "max_num_seqs": 64,
            "max_num_batched_tokens": 8192, "kv_cache_dtype": "fp8", "quantization": None,
            "dtype": "auto", "enforce_eager": False, "attention_backend": None,
            "reasoning_parser": "gemma4", "tool_call_parser": "gemma4",
            "enable_auto_tool_choice": True,
            "chat_template": "/path/to/google-31b-chat-template.jinja", "revision": None,
            "trust_remote_code": False, "enable_prefix_caching": True,
            "enable_chunked_prefill": True, "performance_mode": "balanced",
            "async_scheduling": None, "language_model_only": False,
            "limit_mm_per_prompt": {}, "speculative_config": dict(spec),
            "default_chat_template_kwargs": {"enable_thinking": True},
            "disable_log_stats": False, "block_size": 16, "port": 8000, "host": None,
            "uds": None, "api_server_count": 1, "cpu_offload_gb": 0, "swap_space": 4,
            "enable_lora": False,
        },
        "flags_meta": {
            "set": argv_set, "sources": {k: "argv" for k in argv_set}, "unknown": [
                "--trust-request-chat-template", "--no-scheduler-reserve-full-isl"],
            "removed": [], "launcher": "vllm serve", "container_image": None, "errors": [],
        },
        "model": {
            "id": model_id, "family": "gemma4-31b", "is_gemma4": True, "quantization": "awq",
            "is_int4": True, "multimodal": True,
            "speculative": {**spec, "parallel_drafting": False,
                            "draft_tensor_parallel_size": None},
            "geometry": geometry,
        },
        "gpu": _h100(1),
        "template": {
            "sha256": VETTED_SHA, "size_bytes": 18683,
            "source": "/path/to/google-31b-chat-template.jinja", "identity": "vetted",
            "label": "google/gemma-4-31B-it@68abe480 (2026-07-15)", "pulled": "2026-07-21",
            "parsers": parser_check(None, None, None, None),  # an agent without markers
            "absent": False, "absent_why": None,  # audit/kb/templates.py absence
        },
        "metrics": _metrics(running=60, concurrency=2.6, capacity=85000),
        "geometry": geometry,
        "host": {"hostname": "verda-h100", "machine_id": "m-1", "labels": {}, "gpu_count": 2,
                 "driver": "580.95.05", "cuda": "13.0"},
        # audit/kb/context.py build_context "server" block (env rules read server.env).
        "server": {"pid": 4242, "base_url": "http://127.0.0.1:8000", "env": {},
                   "started_at": None, "errors": [], "key": "http://127.0.0.1:8000",
                   "serving": True, "serving_evidence": ["metrics"]},
        # audit/kb/probes.py: never probed
        "probes": probes_block({}),
    }


def _push() -> dict[str, Any]:
    """Seed 000 PUSH recipe: TP=2 on 2x H100, 262144 context, util 0.94, 256 seqs."""
    ctx = _light()
    ctx["flags"].update(tensor_parallel_size=2, max_model_len=262144,
                        gpu_memory_utilization=0.94, max_num_seqs=256,
                        max_num_batched_tokens=16384)
    ctx["gpu"] = _h100(2)
    # Engine log of the recipe: 244K tokens of KV, max concurrency 6.11x at 262144.
    ctx["metrics"] = _metrics(running=100, concurrency=6.11, capacity=244000)
    ctx["geometry"] = ctx["model"]["geometry"] = _gemma4_31b_geometry(estimate=1_600_000)
    return ctx


def _plain() -> dict[str, Any]:
    """A non-Gemma model (Llama 3.1 8B BF16) on one L40S with defaults, no speculator."""
    ctx = _light()
    ctx["flags"].update(
        model="meta-llama/Llama-3.1-8B-Instruct", max_model_len=None, kv_cache_dtype="auto",
        gpu_memory_utilization=0.92, max_num_seqs=256, max_num_batched_tokens=2048,
        reasoning_parser=None, tool_call_parser=None, enable_auto_tool_choice=False,
        chat_template=None, speculative_config=None, default_chat_template_kwargs=None)
    ctx["flags_meta"].update(set=["model"], sources={"model": "argv"}, unknown=[])
    ctx["model"] = {
        "id": "meta-llama/Llama-3.1-8B-Instruct", "family": "llama", "is_gemma4": False,
        "quantization": "bf16", "is_int4": False, "multimodal": False,
        "speculative": {"method": None, "model": None, "num_speculative_tokens": None,
                        "parallel_drafting": None, "draft_tensor_parallel_size": None},
        "geometry": {key: None for key in _gemma4_31b_geometry(0)} | {"known": False},
    }
    ctx["geometry"] = ctx["model"]["geometry"]
    ctx["gpu"] = {
        "count": 1, "name": "NVIDIA L40S", "known": True, "memory_gib": 44.5,
        "bandwidth_tbs": 0.864, "compute_capability": "8.9", "cc": 8.9, "arch": "ada",
        "fp8": True, "fp4": False, "unified_memory": False,
        "bandwidth_knee_max_num_seqs": 16, "per_server_count": 1,
    }
    ctx["template"] = {key: None for key in ctx["template"]}
    ctx["template"]["parsers"] = parser_check(None, None, None, None)
    ctx["metrics"]["spec_drafts"] = ctx["metrics"]["spec_draft_tokens"] = None
    for key in ("spec_accepted_tokens", "spec_acceptance_rate",
                "spec_mean_acceptance_length", "spec_per_position"):
        ctx["metrics"][key] = ctx["metrics"]["lifetime"][key] = None
    return ctx


PRESETS = {"light": _light, "push": _push, "plain": _plain}


def _model_decision_keys(ctx: dict[str, Any]) -> None:
    """The model-decision keys (``model.arch``/``files``/``family_*``, ``memory``), empty:
    the presets describe no config.json, so nothing is known beyond the family they name."""
    from audit.kb.memory import _empty as empty_memory
    from audit.kb.modelcfg import geometry_from_config

    model = ctx["model"]
    model.setdefault("family_source", "model name matches models.yaml")
    model.setdefault("family_decided", model.get("family") not in (None, "other"))
    arch = geometry_from_config(None)
    arch.update(source=None, estimate=False, derived_max_model_len=None)
    model.setdefault("arch", arch)
    model.setdefault("files", {"available": False, "source": None, "weights_bytes": None,
                               "weights_dtype": None, "quantization_config": None,
                               "speculator_weights_bytes": None, "errors": []})
    model.setdefault("attention", {"forced": None, "problems": [], "can_serve": None,
                                   "would_serve": []})
    model.setdefault("parsers", {"mismatch": [], "tool_fits": None, "reasoning_fits": None})
    model.setdefault("hybrid_thinking", False)
    model.setdefault("hybrid_thinking_by", "")
    ctx.setdefault("memory", empty_memory())


def make_context(preset: str = "light", overrides: dict[str, Any] | None = None) -> dict:
    """A complete context for ``preset`` with dotted-path ``overrides`` applied.

    ``{"model.speculative.method": "mtp"}`` sets one nested key; the path must exist
    (raises ``KeyError`` otherwise, so a typo cannot silently add a key).
    """
    ctx = copy.deepcopy(PRESETS[preset]())
    _model_decision_keys(ctx)
    for path, value in (overrides or {}).items():
        *parents, leaf = path.split(".")
        node = ctx
        for key in parents:
            node = node[key]
        if leaf not in node:
            raise KeyError(f"{path} is not a context key")
        node[leaf] = value
    # As in audit/kb/context.py, /metrics answering is evidence of serving: a scenario that
    # turns metrics off models a server not seen serving unless it says otherwise.
    # As in audit/kb/context.py, hybrid thinking is derived from the template's markers, the
    # model type and the id, so it follows a scenario's overrides of those.
    if "model.hybrid_thinking" not in (overrides or {}):
        ctx["model"]["hybrid_thinking"], ctx["model"]["hybrid_thinking_by"] = hybrid_thinking(
            ctx["template"]["parsers"], ctx["model"]["arch"].get("model_type"),
            ctx["model"].get("id"))
    if "server.serving" not in (overrides or {}):
        serving = ctx["metrics"].get("available") is True
        ctx["server"].update(serving=serving, serving_evidence=["metrics"] if serving else [])
    return ctx
