"""Memory budget of one GPU of a vLLM server, for any decoder model.

Inputs: the geometry of :func:`audit.kb.modelcfg.geometry_from_config`, the weights (bytes
reported by the node, else parameters x bytes of the quantisation, marked as an estimate),
the parallelism and the engine flags. The arithmetic follows what vLLM does at start-up
(vllm-facts §6.3; ``vllm/v1/kv_cache_interface.py``; ``vllm/worker/gpu_worker.py``
``determine_available_memory``):

* budget = GPU memory x ``gpu_memory_utilization``;
* weights per GPU = weights / (TP x PP); a drafter's weights / its TP;
* activation peak of the profiling run from the shapes (:func:`activation_bytes_per_token`),
  else 0.8 GiB per 1024 tokens of the profiling batch
  (``max_num_batched_tokens``; with chunked prefill off, a whole ``max_model_len`` prompt),
  and a runtime reserve of 1.5 GiB (CUDA context, NCCL, CUDA graphs). Both are the line
  calibrated in :mod:`audit.kb.geometry` on seed 000 (Gemma 4 31B, within 4 %) and case 038
  (Llama 3 8B: 2.53 GiB activations + 0.39 GiB non-torch at 2048 tokens);
* KV bytes per token per GPU: full and sliding layers ``2 x max(1, kv_heads // TP) x
  head_dim x bytes``, MLA layers ``(kv_lora_rank + qk_rope_head_dim) x bytes`` (the latent is
  replicated on every TP rank), layers divided by PP; linear/Mamba layers hold a fixed state
  per sequence instead (conv + SSM elements / TP);
* KV pool = budget - weights - drafter - activations - runtime; token capacity = pool /
  bytes per token; one request of ``max_model_len`` = tokens x full/MLA bytes + the sliding
  window's blocks (:func:`audit.kb.geometry.request_bytes`) + one state.

Everything is per GPU, in GiB (2**30 bytes) unless a key says bytes or tokens. When the
engine exposes ``cache_config_info`` (``num_gpu_blocks`` x ``block_size``), its pool is shown
next to the estimate: the engine's figure is the truth, ours explains it.
"""

from __future__ import annotations

import math
from typing import Any

from audit.kb.geometry import (
    OVERHEAD_BASE_GIB,
    OVERHEAD_PER_1K_TOKENS_GIB,
    longest_request,
    request_bytes,
)
from audit.kb.modelparams import BYTES_PER_PARAM

_GIB = 2**30
#: Non-torch memory (CUDA context, NCCL): 0.35-0.39 GiB logged in vllm#10517 and case 038;
#: plus ~0.6 GiB of CUDA-graph headroom (estimate, not sourced) when activations come from
#: the shapes.
RUNTIME_GIB = 1.0
_KV_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1,
             "fp8_inc": 1, "fp8_ds_mla": 1, "int8_per_token_head": 1, "fp8_per_token_head": 1,
             "nvfp4": 0.5, "float32": 4}
#: Rope types whose ``max_position_embeddings`` already includes the extension (vLLM's
#: ``_get_and_verify_max_len`` does not multiply them again).
_ROPE_ALREADY_APPLIED = {"llama3", "longrope", "su", "mrope", "default"}


def derived_max_model_len(geom: dict[str, Any], rope_override: dict | None = None) -> int | None:
    """``max_model_len`` vLLM derives when the flag is unset (``_get_and_verify_max_len``):
    ``max_position_embeddings``; with rope scaling other than llama3/longrope, times its
    ``factor``, starting from ``original_max_position_embeddings`` for YaRN. A rope override
    (``--rope-scaling`` / ``--hf-overrides``) replaces the config's."""
    native = geom.get("max_position_embeddings")
    rope = _rope_of(rope_override) or geom.get("rope_scaling")
    if not native or not rope or rope.get("type") in _ROPE_ALREADY_APPLIED:
        return native
    factor = rope.get("factor")
    if not isinstance(factor, (int, float)) or isinstance(factor, bool) or factor <= 0:
        return native
    base = rope.get("original_max_position_embeddings") if rope.get("type") == "yarn" else None
    return int((base if isinstance(base, int) and base > 0 else native) * factor)


def _rope_of(value: Any) -> dict[str, Any] | None:
    if not isinstance(value, dict):
        return None
    rope = value.get("rope_scaling") if isinstance(value.get("rope_scaling"), dict) else value
    kind = rope.get("rope_type") or rope.get("type")
    return {"type": kind, "factor": rope.get("factor"),
            "original_max_position_embeddings": rope.get("original_max_position_embeddings")
            } if kind else None


def kv_dtype_bytes(kv_cache_dtype: str | None, torch_dtype: str | None) -> float:
    """Bytes per KV element: the explicit ``--kv-cache-dtype``, else the model dtype (2)."""
    explicit = _KV_BYTES.get((kv_cache_dtype or "auto").lower())
    if explicit:
        return explicit
    return 4 if (torch_dtype or "").lower() == "float32" else 2


def kv_bytes_by_kind(geom: dict[str, Any], tp: int, pp: int, dtype_b: float) -> dict[str, float]:
    """KV bytes per token per GPU for each cached kind (full, sliding, mla)."""
    counts, tp, pp = geom["layer_counts"], max(1, tp), max(1, pp)
    out = {"full": 0.0, "sliding": 0.0, "mla": 0.0}
    if counts["full"] and geom["global_kv_heads"] and geom["global_head_dim"]:
        out["full"] = counts["full"] / pp * 2 * max(1, geom["global_kv_heads"] // tp) \
            * geom["global_head_dim"] * dtype_b
    if counts["sliding"] and geom["kv_heads"] and geom["head_dim"]:
        out["sliding"] = counts["sliding"] / pp * 2 * max(1, geom["kv_heads"] // tp) \
            * geom["head_dim"] * dtype_b
    if counts["mla"] and geom["kv_lora_rank"]:
        out["mla"] = counts["mla"] / pp * (geom["kv_lora_rank"] + geom["qk_rope_head_dim"]) \
            * dtype_b
    return out


def state_bytes_per_seq(geom: dict[str, Any], tp: int, pp: int, dtype_b: float) -> float:
    """Bytes of linear-attention/Mamba state one sequence holds per GPU (0 without them)."""
    counts = geom["layer_counts"]
    layers = (counts["linear"] + counts["mamba"]) / max(1, pp)
    if not layers or geom["conv_state_elements"] is None:
        return 0.0
    ssm_b = geom["ssm_state_dtype_bytes"] or max(2, dtype_b)
    per_layer = (geom["conv_state_elements"] * max(2, dtype_b)
                 + geom["ssm_state_elements"] * ssm_b) / max(1, tp)
    return layers * per_layer


def weights_per_gpu(geom: dict[str, Any], weights_bytes: int | None, quant: str | None,
                    tp: int, pp: int, ep_shards: int = 1) -> tuple[float | None, str]:
    """(weights GiB per GPU, how it was found). With expert parallelism over ``ep_shards``
    data-parallel ranks the routed experts are split TP x DP ways, the rest TP ways
    (the expert share comes from the config's shapes). A MoE whose expert share is unknown
    (geometry from the model name only, e.g. ``480B-A35B``) is counted as if all its weights
    were experts: a lower bound, so that a "does not fit" verdict is never made up from a
    guess (demo case 031: 480B FP8 over DP 8 with expert parallel loads, 447 GiB per GPU is
    wrong). A dense model, or no expert parallelism, splits all weights TP x PP.
    """
    shards = max(1, tp) * max(1, pp)
    experts, params = geom.get("expert_params_b"), geom.get("params_b")
    share = experts / params if ep_shards > 1 and experts and params else 0.0
    moe = bool(geom.get("is_moe") or geom.get("active_params_b"))
    lower_bound = ep_shards > 1 and not share and moe
    share = 1.0 if lower_bound else share

    def split(total: float) -> float:
        return total * (1 - share) / shards + total * share / (shards * ep_shards)

    note = f", experts over {ep_shards} DP ranks" if share else ""
    note += " (lower bound: expert share unknown)" if lower_bound else ""
    if weights_bytes:
        return split(weights_bytes) / _GIB, f"weights_bytes reported by the node{note}"
    per_param = BYTES_PER_PARAM.get(quant or "bf16")
    if params and per_param:
        return split(params * 1e9 * per_param) / _GIB, (
            f"estimate: {params}B parameters x {per_param} bytes ({quant or 'bf16'}){note}")
    return None, "weights unknown (no weights_bytes, no parameter count)"


def _empty() -> dict[str, Any]:
    keys = ("gpu_memory_gib", "gpu_memory_utilization", "budget_gib", "weights_gib",
            "weights_source", "drafter_gib", "activation_gib", "runtime_gib", "profile_tokens",
            "kv_gib", "kv_bytes_per_token", "state_bytes_per_seq", "kv_capacity_tokens",
            "state_capacity_seqs", "max_model_len", "request_gib", "max_concurrency",
            "single_request_max_tokens", "fits_weights", "fits_one_request",
            "engine_kv_tokens", "engine_vs_estimate", "free_gib", "arithmetic_text")
    out: dict[str, Any] = dict.fromkeys(keys)
    out.update(known=False, estimate=False, kv_bytes_by_kind={}, arithmetic=[], bar=[],
               notes=[])
    return out


def memory_budget(geom: dict[str, Any], *, weights_bytes: int | None, quant: str | None,
                  drafter_bytes: int | None, tp: int, pp: int, memory_gib: float | None,
                  util: float | None, kv_cache_dtype: str | None, max_model_len: int | None,
                  max_num_batched_tokens: int | None, chunked_prefill: bool | None,
                  block_size: int | None, draft_tp: int | None = None,
                  engine_cache: dict[str, Any] | None = None,
                  weights_source: str | None = None, ep_shards: int = 1) -> dict[str, Any]:
    """The ``memory`` context block (keys of :func:`_empty`; see the module docstring);
    ``arithmetic_text`` is ``arithmetic`` joined with "; " for messages."""
    out = _budget(geom, weights_bytes=weights_bytes, quant=quant, drafter_bytes=drafter_bytes,
                  tp=tp, pp=pp, memory_gib=memory_gib, util=util,
                  kv_cache_dtype=kv_cache_dtype, max_model_len=max_model_len,
                  max_num_batched_tokens=max_num_batched_tokens,
                  chunked_prefill=chunked_prefill, block_size=block_size, draft_tp=draft_tp,
                  engine_cache=engine_cache, weights_source=weights_source,
                  ep_shards=ep_shards)
    out["arithmetic_text"] = "; ".join(out["arithmetic"]) or None
    return out


def _budget(geom: dict[str, Any], *, weights_bytes: int | None, quant: str | None,
            drafter_bytes: int | None, tp: int, pp: int, memory_gib: float | None,
            util: float | None, kv_cache_dtype: str | None, max_model_len: int | None,
            max_num_batched_tokens: int | None, chunked_prefill: bool | None,
            block_size: int | None, draft_tp: int | None,
            engine_cache: dict[str, Any] | None, weights_source: str | None,
            ep_shards: int) -> dict[str, Any]:
    out = _empty()
    out.update(gpu_memory_gib=memory_gib, gpu_memory_utilization=util,
               max_model_len=max_model_len)
    if geom.get("known"):
        dtype_b = kv_dtype_bytes(kv_cache_dtype, geom.get("torch_dtype"))
        by_kind = kv_bytes_by_kind(geom, tp, pp, dtype_b)
        out["kv_bytes_by_kind"] = by_kind
        out["kv_bytes_per_token"] = sum(by_kind.values())
        out["state_bytes_per_seq"] = state_bytes_per_seq(geom, tp, pp, dtype_b)
    weights, how = weights_per_gpu(geom, weights_bytes, quant, tp, pp, ep_shards)
    how = weights_source if weights_source and weights_bytes else how
    out.update(weights_gib=_r(weights), weights_source=how, estimate=how.startswith("estimate"))
    out["drafter_gib"] = _r((drafter_bytes or 0) / max(1, draft_tp or tp) / _GIB)
    _profile(out, max_num_batched_tokens, chunked_prefill, max_model_len,
             activation_bytes_per_token(geom, tp))
    _engine(out, engine_cache)
    if memory_gib is None or util is None or weights is None:
        out["notes"].append("the budget needs GPU memory, utilisation and the weights' size")
        return out
    if not geom.get("known"):
        # Weights alone can still be checked (e.g. parameters read from the model name).
        budget = memory_gib * util
        spare = budget - weights - out["drafter_gib"] - out["runtime_gib"]
        out.update(budget_gib=_r(budget), fits_weights=spare > 0,
                   free_gib=_r(memory_gib - budget))
        out["notes"].append("model geometry unknown: KV sizing cannot be checked")
        out["arithmetic"].append(
            f"{memory_gib:.1f} GiB x {util} = {budget:.2f} GiB budget; - weights "
            f"{weights:.2f} - drafter {out['drafter_gib']:.2f} - runtime "
            f"{out['runtime_gib']:.2f} = {spare:.2f} GiB left ({how})")
        return out
    _pool(out, geom, memory_gib, util, block_size or 16)
    return out


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def activation_bytes_per_token(geom: dict[str, Any], tp: int) -> float | None:
    """Peak activation bytes per token of the profiling batch, per GPU, from the shapes:
    ``1.2 x 2 B x (2 x intermediate / TP + 4 x hidden)`` (gate+up of the MLP, the residual
    stream and attention in/out, 20 %% allocator slack). MoE layers use the active experts'
    width. Fitted on vllm#10517 (Llama 3.1 8B, V0: 2.06 GiB at 20000 tokens, 2.99 GiB at
    29000 vs 2.07 / 2.98 logged). None when the shapes are missing."""
    hidden = geom.get("hidden_size")
    inter = geom.get("intermediate_size")
    if geom.get("is_moe") and geom.get("moe_intermediate_size"):
        inter = geom["moe_intermediate_size"] * (geom.get("active_experts") or 1)
    if not hidden or not inter:
        return None
    return 1.2 * 2 * (2 * inter / max(1, tp) + 4 * hidden)


def _profile(out: dict[str, Any], batched: int | None, chunked: bool | None,
             max_model_len: int | None, per_token: float | None) -> None:
    tokens = batched
    if tokens is None:  # V0 without chunked prefill: one max_model_len prompt (>= 2048)
        tokens = max(max_model_len or 0, 2048) if chunked is not True else 2048
    if chunked is False and max_model_len:
        tokens = max(tokens, max_model_len)
        out["notes"].append(f"chunked prefill off: the profiling batch is one {tokens}-token "
                            "prompt")
    out["profile_tokens"] = tokens
    if per_token:
        out["activation_gib"] = _r(per_token * tokens / _GIB)
        out["runtime_gib"] = RUNTIME_GIB
    else:  # no shapes: the Gemma 4 calibrated line of audit.kb.geometry
        out["activation_gib"] = _r(OVERHEAD_PER_1K_TOKENS_GIB * tokens / 1024)
        out["runtime_gib"] = OVERHEAD_BASE_GIB


def _engine(out: dict[str, Any], cache: dict[str, Any] | None) -> None:
    cache = cache or {}
    blocks, size = cache.get("num_gpu_blocks"), cache.get("block_size")
    try:
        out["engine_kv_tokens"] = int(float(blocks)) * int(float(size)) if blocks and size \
            else None
    except (TypeError, ValueError):
        out["engine_kv_tokens"] = None


def _pool(out: dict[str, Any], geom: dict[str, Any], memory_gib: float, util: float,
          block: int) -> None:
    budget = memory_gib * util
    used = out["weights_gib"] + out["drafter_gib"] + out["activation_gib"] + out["runtime_gib"]
    kv_gib = budget - used
    # Weights "fit" when they load (weights + drafter + runtime within the budget); the
    # activations of the profiling run then decide whether any KV is left (kv_gib).
    fits = budget - out["weights_gib"] - out["drafter_gib"] - out["runtime_gib"] > 0
    out.update(budget_gib=_r(budget), kv_gib=_r(kv_gib), known=True, fits_weights=fits,
               free_gib=_r(memory_gib - budget))
    out["arithmetic"].append(
        f"{memory_gib:.1f} GiB x {util} = {budget:.2f} GiB budget; - weights "
        f"{out['weights_gib']:.2f} - drafter {out['drafter_gib']:.2f} - activations "
        f"{out['activation_gib']:.2f} ({out['profile_tokens']} tokens) - runtime "
        f"{out['runtime_gib']:.2f} = {kv_gib:.2f} GiB for KV")
    _bar(out, memory_gib, max(kv_gib, 0.0))
    per_token, state = out["kv_bytes_per_token"], out["state_bytes_per_seq"]
    kv_bytes = max(kv_gib, 0.0) * _GIB
    if per_token:
        out["kv_capacity_tokens"] = int(kv_bytes / per_token)
        out["arithmetic"].append(f"{kv_gib:.2f} GiB / {per_token:.0f} B per token = "
                                 f"{out['kv_capacity_tokens']} tokens of KV")
    if state:
        _hybrid_blocks(out, geom, kv_bytes)
    _request(out, geom, kv_bytes, block)
    if out["engine_kv_tokens"] and out["kv_capacity_tokens"]:
        out["engine_vs_estimate"] = round(out["engine_kv_tokens"] / out["kv_capacity_tokens"], 2)


def _hybrid_blocks(out: dict[str, Any], geom: dict[str, Any], kv_bytes: float) -> None:
    """Hybrid models share one block pool (vLLM ``HybridKVCacheCoordinator``): every cached
    layer gets one page per block, the page fits one sequence's linear/Mamba state, and the
    attention block size grows (multiple of 16) until its page is as large. Each running
    sequence needs one block per state layer: ``state_capacity_seqs`` = blocks (the number
    in "max_num_seqs (N) exceeds available Mamba cache blocks (M)", vllm#49064)."""
    counts = geom["layer_counts"]
    state_layers = counts["linear"] + counts["mamba"]
    attn_layers = counts["full"] + counts["sliding"] + counts["mla"]
    per_layer_state = out["state_bytes_per_seq"] / max(1, state_layers)
    per_token_layer = out["kv_bytes_per_token"] / max(1, attn_layers) if attn_layers else 0.0
    block = 16
    if per_token_layer:
        block = max(16, math.ceil(per_layer_state / per_token_layer / 16) * 16)
    page = max(per_layer_state, per_token_layer * block)
    blocks = int(kv_bytes / (page * (state_layers + attn_layers)))
    out["state_capacity_seqs"] = blocks
    out["hybrid_block_tokens"] = block  # also the prefix cache's unit (live invariants)
    if attn_layers:
        out["kv_capacity_tokens"] = blocks * block
    out["arithmetic"].append(
        f"hybrid pool: page {page / 2**20:.2f} MiB x {state_layers + attn_layers} layers per "
        f"block -> {blocks} blocks = at most {blocks} running sequences "
        f"({block}-token attention blocks)")


def _request(out: dict[str, Any], geom: dict[str, Any], kv_bytes: float, block: int) -> None:
    by_kind, length = out["kv_bytes_by_kind"], out["max_model_len"]
    linear = by_kind["full"] + by_kind["mla"]
    window = geom["sliding_window"] if by_kind["sliding"] else None
    batched = out["profile_tokens"]
    if length:
        need = request_bytes(length, linear, by_kind["sliding"], window, batched, block) \
            + out["state_bytes_per_seq"]
        out["request_gib"] = _r(need / _GIB)
        out["fits_one_request"] = bool(need and need <= kv_bytes)
        out["max_concurrency"] = round(kv_bytes / need, 2) if need else None
        out["arithmetic"].append(f"one {length}-token request needs {need / _GIB:.2f} GiB of "
                                 f"KV per GPU: {out['max_concurrency']}x fit")
    if linear or by_kind["sliding"]:
        spare = max(0.0, kv_bytes - out["state_bytes_per_seq"])
        out["single_request_max_tokens"] = longest_request(
            spare, linear, by_kind["sliding"], window, batched, block) if linear \
            else 10**9


def _bar(out: dict[str, Any], memory_gib: float, kv_gib: float) -> None:
    """Stacked-bar segments in GiB and percent of the GPU (weights, KV, activations, ...)."""
    parts = [("weights", out["weights_gib"] + out["drafter_gib"]), ("kv", kv_gib),
             ("activations", out["activation_gib"]), ("runtime", out["runtime_gib"]),
             ("free", out["free_gib"])]
    total = max(memory_gib, sum(v for _, v in parts)) or 1.0
    # `x` is the segment's start in percent: the page draws the bar as SVG rects, since the
    # Content-Security-Policy forbids inline style widths.
    out["bar"], x = [], 0.0
    for label, value in parts:
        pct = round(100 * value / total, 1)
        out["bar"].append({"label": label, "gib": round(value, 2), "pct": pct, "x": round(x, 1)})
        x += pct


def max_model_len_for(budget: dict[str, Any], geom: dict[str, Any], block: int = 16) -> int:
    """Longest ``max_model_len`` one request can hold in this budget (0 when none)."""
    kv = budget.get("kv_gib")
    if not kv or kv <= 0:
        return 0
    by_kind = budget["kv_bytes_by_kind"]
    linear = by_kind["full"] + by_kind["mla"]
    spare = kv * _GIB - (budget["state_bytes_per_seq"] or 0)
    if not linear:
        return geom.get("max_position_embeddings") or 0
    window = geom["sliding_window"] if by_kind["sliding"] else None
    return max(0, math.floor(longest_request(spare, linear, by_kind["sliding"], window,
                                              budget["profile_tokens"], block)))
