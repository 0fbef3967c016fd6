"""Model family, quantization, speculator and KV-cache geometry for one server.

Table: ``data/models.yaml`` (loaded once). KV arithmetic follows vllm-facts §6.3:

* bytes per token per layer = ``2 x kv_heads_per_rank x head_dim x bytes(kv dtype)`` with
  ``kv_heads_per_rank = max(1, kv_heads // TP)``; layers per GPU = layers / PP;
* one request of L tokens holds ``L x global_bytes`` on global layers and, on sliding layers,
  ``(ceil(min(window - 1 + max_num_batched_tokens, L) / block) + 1) x block x sliding_bytes``;
* KV memory per GPU = ``memory_gib x util - weights/(TP x PP) - drafter/TP - overhead``.

Overhead (activations, CUDA graphs, NCCL and CUDA context inside the utilisation budget) is
``1.5 GiB + 0.8 GiB per 1024 max_num_batched_tokens`` per GPU, calibrated on seed 000:
LIGHT (TP=1 H100 80GB, AWQ 31B, fp8 KV, util 0.85, 8192 tokens, EAGLE3) -> ~88K tokens of
KV vs the seed's ~85K (+4%); TP=1 util 0.94 -> ~105K vs "per-card ~102K" (+3%); PUSH (TP=2,
util 0.94, 16384 tokens) -> ~235K tokens vs 244K (-4%), single-request concurrency at 262144
~5.9x vs the engine's 6.11x (-3%), and a single request far above 262144. Case 038's log
(Llama 8B: activation peak 2.53 GiB + non-torch 0.39 GiB at 2048-token chunks) agrees with the
same line (3.1 GiB). These are estimates: prefer ``cache_config_info`` when the server exposes it.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from audit.kb.paths import load_data, safe_load_yaml

_GIB = 2**30
OVERHEAD_BASE_GIB = 1.5       # seed 000 calibration, see module docstring
OVERHEAD_PER_1K_TOKENS_GIB = 0.8


def _parse(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    data = safe_load_yaml(path.read_text(encoding="utf-8"))
    models = data["models"]
    for row in models:
        row["_re"] = [re.compile(p, re.IGNORECASE) for p in row["match"]]
    drafters = data.get("drafters", [])
    for row in drafters:
        row["_re"] = re.compile(row["match"], re.IGNORECASE)
    return models, drafters


def _load() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(models, drafters) of the active KB's ``models.yaml`` (see audit.kb.paths)."""
    return load_data("models.yaml", _parse)


def models_table() -> list[dict[str, Any]]:
    """The model rows of the active KB (an installed bundle's once one is; cached by
    :func:`audit.kb.paths.load_data` until the file changes), not the import-time copy."""
    return _load()[0]

_QUANT_FLAG_MAP = {
    "awq": "awq", "awq_marlin": "awq", "gptq": "gptq", "gptq_marlin": "gptq", "marlin": "gptq",
    "auto_gptq": "gptq", "fp8": "fp8", "fbgemm_fp8": "fp8", "fp8_per_tensor": "fp8",
    "fp8_per_block": "fp8", "modelopt_fp4": "nvfp4", "nvfp4": "nvfp4", "gguf": "gguf",
    "bitsandbytes": "bnb-4bit", "mxfp4": "mxfp4", "gpt_oss_mxfp4": "mxfp4",
    "int8_per_channel_weight_only": "int8", "experts_int8": "int8", "modelopt_mxfp8": "fp8",
}
# Order matters: the most specific marker in a model id wins.
_ID_MARKERS = (
    ("nvfp4", "nvfp4"), ("mxfp4", "mxfp4"), (r"qat.*(w4a16|int4|awq)|(w4a16|int4|awq).*qat",
                                             "qat-w4a16"),
    ("awq", "awq"), ("gptq", "gptq"), (r"w4a16|int4|4bit|4-bit", "int4"), ("gguf", "gguf"),
    (r"fp8|w8a8-fp8", "fp8"), (r"w8a8|int8", "int8"), (r"bf16|bfloat16", "bf16"),
    (r"fp16|float16", "fp16"),
)
INT4_QUANTS = {"awq", "gptq", "int4", "qat-w4a16"}
_KV_BYTES = {"auto": None, "bfloat16": 2, "float16": 2, "half": 2, "fp8": 1, "fp8_e4m3": 1,
             "fp8_e5m2": 1, "fp8_inc": 1, "fp8_ds_mla": 1, "int8_per_token_head": 1,
             "fp8_per_token_head": 1, "nvfp4": 0.5}


def find_model(*hints: str | None) -> dict[str, Any] | None:
    """First table row whose pattern matches any hint (model id, host path, served name)."""
    for hint in hints:
        if not hint:
            continue
        for row in _load()[0]:
            if any(p.search(hint) for p in row["_re"]):
                return row
    return None


def detect_quantization(flag_quant: str | None, dtype: str | None,
                        *hints: str | None) -> tuple[str | None, str]:
    """Quantization label + how it was found. ``flag_quant`` (``--quantization``) wins unless
    it is a container format (``compressed-tensors``, ``modelopt``) whose scheme the model id
    names; then the id markers; then ``--dtype``. Returns (None, reason) when nothing says.
    Labels: bf16, fp16, fp8, int8, awq, gptq, int4, qat-w4a16, nvfp4, mxfp4, gguf, bnb-4bit."""
    flag = (flag_quant or "").lower()
    if flag in _QUANT_FLAG_MAP:
        return _QUANT_FLAG_MAP[flag], f"--quantization {flag_quant}"
    for hint in hints:
        for pattern, label in _ID_MARKERS:
            if hint and re.search(pattern, hint, re.IGNORECASE):
                return label, f"model id/path marker in {hint!r}"
    if flag == "modelopt":
        return "fp8", "--quantization modelopt without an FP4 marker (modelopt FP8)"
    if (dtype or "").lower() in ("float16", "half", "bfloat16"):
        label = "bf16" if dtype.lower() == "bfloat16" else "fp16"
        return label, f"--dtype {dtype}"
    if flag:
        return flag, f"--quantization {flag_quant} (scheme not named by the model id)"
    return None, "no quantization marker in flags or model id"


def _kv_dtype_bytes(kv_cache_dtype: str | None, weight_quant: str | None) -> float:
    """Bytes per KV element: explicit kv dtype, else the model dtype (2 bytes for BF16/FP16,
    also for quantized checkpoints whose activations are 16-bit)."""
    explicit = _KV_BYTES.get((kv_cache_dtype or "auto").lower())
    if explicit:
        return explicit
    return 4 if weight_quant == "fp32" else 2


def _per_rank(heads: int | None, tp: int) -> int | None:
    return None if heads is None else max(1, heads // max(1, tp))


def _layer_bytes(heads: int | None, head_dim: int | None, tp: int, dtype_b: float) -> float | None:
    per = _per_rank(heads, tp)
    return None if per is None or head_dim is None else 2 * per * head_dim * dtype_b


def kv_bytes_per_token(row: dict[str, Any], tp: int, pp: int,
                       dtype_b: float) -> tuple[float | None, float | None]:
    """(global, sliding) KV bytes per token per GPU at this TP/PP and KV element size.
    A model without sliding layers reports all layers as global."""
    pp = max(1, pp)
    layers, sliding = row.get("layers"), row.get("sliding_layers") or 0
    global_layers = row.get("global_layers", (layers - sliding) if layers else None)
    g_heads = row.get("global_kv_heads") or row.get("kv_heads")
    g_dim = row.get("global_head_dim") or row.get("head_dim")
    g_layer = _layer_bytes(g_heads, g_dim, tp, dtype_b)
    s_layer = _layer_bytes(row.get("kv_heads"), row.get("head_dim"), tp, dtype_b)
    g_total = g_layer * global_layers / pp if g_layer and global_layers else None
    s_total = s_layer * sliding / pp if s_layer and sliding else (0.0 if g_total else None)
    return g_total, s_total


def weight_gib(row: dict[str, Any] | None, quant: str | None) -> float | None:
    """Weights in GiB for this quantization (table GB -> GiB), None when not sourced."""
    table = (row or {}).get("weights_gb") or {}
    value = table.get(quant or "bf16") if quant or table else None
    return round(value * 1e9 / _GIB, 2) if value else None


def drafter_gib(spec_model: str | None) -> float:
    """Known drafter weights in GiB (``drafters`` table), 0 when unknown."""
    for row in _load()[1]:
        if isinstance(spec_model, str) and row["_re"].search(spec_model):
            return round(row["weights_gb"] * 1e9 / _GIB, 2)
    return 0.0


def overhead_gib(max_num_batched_tokens: int | None) -> float:
    """Non-KV reserve per GPU inside the utilisation budget (calibration: module docstring)."""
    tokens = max_num_batched_tokens or 2048
    return OVERHEAD_BASE_GIB + OVERHEAD_PER_1K_TOKENS_GIB * tokens / 1024


def request_bytes(tokens: int, g_bytes: float, s_bytes: float, window: int | None,
                  batched: int, block: int) -> float:
    """KV bytes one request of ``tokens`` holds per GPU (vllm-facts §6.3)."""
    total = tokens * g_bytes
    if s_bytes and window:
        capped = min(window - 1 + batched, tokens)
        total += (math.ceil(capped / block) + 1) * block * s_bytes
    return total


def _empty_geometry() -> dict[str, Any]:
    keys = ("layers", "sliding_layers", "global_layers", "kv_heads", "global_kv_heads",
            "head_dim", "global_head_dim", "sliding_window", "max_position_embeddings",
            "num_attention_heads", "weight_gib", "kv_bytes_per_token_global",
            "kv_bytes_per_token_sliding", "kv_memory_gib_estimate",
            "kv_capacity_tokens_estimate", "single_request_max_tokens_estimate",
            "max_concurrency_estimate", "overhead_gib", "drafter_gib", "source")
    out: dict[str, Any] = dict.fromkeys(keys)
    out.update(known=False, notes=[])
    return out


def geometry_context(row: dict[str, Any] | None, *, quant: str | None, tp: int, pp: int,
                     kv_cache_dtype: str | None, max_model_len: int | None,
                     max_num_batched_tokens: int | None, block_size: int | None,
                     memory_gib: float | None, util: float | None,
                     spec_model: str | None = None) -> dict[str, Any]:
    """The ``geometry`` block: table fields + per-GPU KV sizing estimates.

    ``known`` is True when layers, KV heads and head dim are all sourced. Estimates are None
    when an input is missing (GPU memory, utilisation, weights for this quantization).
    ``single_request_max_tokens_estimate`` is the longest request the KV estimate holds
    (sliding layers capped); ``max_concurrency_estimate`` mirrors the engine's "Maximum
    concurrency for max_model_len tokens" line. Units: bytes per token per GPU, GiB per GPU.
    """
    out = _empty_geometry()
    if row is None:
        out["notes"].append("model not in the geometry table")
        return out
    for key in ("layers", "sliding_layers", "global_layers", "kv_heads", "global_kv_heads",
                "head_dim", "global_head_dim", "sliding_window", "max_position_embeddings",
                "num_attention_heads", "source"):
        out[key] = row.get(key)
    out["known"] = all(row.get(k) for k in ("layers", "kv_heads", "head_dim"))
    out["weight_gib"] = weight_gib(row, quant)
    if not out["known"]:
        out["notes"].append("geometry not sourced for this model: KV sizing cannot be checked")
        return out
    dtype_b = _kv_dtype_bytes(kv_cache_dtype, quant)
    g_bytes, s_bytes = kv_bytes_per_token(row, tp, pp, dtype_b)
    out["kv_bytes_per_token_global"], out["kv_bytes_per_token_sliding"] = g_bytes, s_bytes
    _fill_capacity(out, tp=tp, pp=pp, max_model_len=max_model_len, batched=max_num_batched_tokens,
                   block=block_size or 16, memory_gib=memory_gib, util=util,
                   spec_model=spec_model)
    return out


def _fill_capacity(out: dict[str, Any], *, tp: int, pp: int, max_model_len: int | None,
                   batched: int | None, block: int, memory_gib: float | None,
                   util: float | None, spec_model: str | None) -> None:
    """KV memory per GPU and what it holds; leaves None (with a note) when inputs lack."""
    if memory_gib is None or util is None or out["weight_gib"] is None:
        out["notes"].append("KV estimate needs GPU memory, utilisation and weight size")
        return
    batched = batched or 2048
    out["overhead_gib"] = round(overhead_gib(batched), 2)
    out["drafter_gib"] = drafter_gib(spec_model)
    kv_gib = (memory_gib * util - out["weight_gib"] / (max(1, tp) * max(1, pp))
              - out["drafter_gib"] / max(1, tp) - out["overhead_gib"])
    out["kv_memory_gib_estimate"] = round(kv_gib, 2)
    g_bytes = out["kv_bytes_per_token_global"] or 0.0
    s_bytes = out["kv_bytes_per_token_sliding"] or 0.0
    if kv_gib <= 0 or g_bytes + s_bytes <= 0:
        out["kv_capacity_tokens_estimate"] = 0
        out["single_request_max_tokens_estimate"] = 0
        out["notes"].append("weights and overhead exceed the utilisation budget")
        return
    kv_bytes = kv_gib * _GIB
    out["kv_capacity_tokens_estimate"] = int(kv_bytes / (g_bytes + s_bytes))
    window = out["sliding_window"] if s_bytes else None
    out["single_request_max_tokens_estimate"] = longest_request(
        kv_bytes, g_bytes, s_bytes, window, batched, block)
    length = max_model_len or out["max_position_embeddings"]
    if length:
        need = request_bytes(length, g_bytes, s_bytes, window, batched, block)
        out["max_concurrency_estimate"] = round(kv_bytes / need, 2) if need else None


def longest_request(kv_bytes: float, g_bytes: float, s_bytes: float, window: int | None,
                     batched: int, block: int) -> int:
    """Largest L with request_bytes(L) <= kv_bytes (sliding part is constant once L passes
    the cap, so solve the linear part; fall back to bisection below the cap)."""
    if not g_bytes:  # pure sliding model: unbounded by KV in principle
        return 10**9
    cap_tokens = (window - 1 + batched) if window else 0
    sliding_cap = request_bytes(cap_tokens, 0.0, s_bytes, window, batched, block) if window else 0
    linear = int((kv_bytes - sliding_cap) / g_bytes)
    if linear >= cap_tokens:
        return max(0, linear)
    low, high = 0, cap_tokens
    while low < high:
        mid = (low + high + 1) // 2
        if request_bytes(mid, g_bytes, s_bytes, window, batched, block) <= kv_bytes:
            low = mid
        else:
            high = mid - 1
    return low
