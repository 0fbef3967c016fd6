"""Parameter count of a decoder from its config's matrix shapes (an estimate, in billions).

Used only when the node could not report ``weights_bytes``: weights = parameters x bytes per
parameter of the quantisation (:data:`BYTES_PER_PARAM`). Counted: embeddings (twice when
untied), per layer the attention projections (standard, MLA, gated delta-net or Mamba2 in/out
projections), the MLP (dense ``3 x hidden x intermediate``; MoE ``experts x 3 x hidden x
moe_intermediate`` plus shared experts and the router) and, for MoE, what one token uses
(active parameters). Norms, biases and vision towers are left out (well under 1 %% for the
models of the catalogue, checked in tests against the published totals).
"""

from __future__ import annotations

from typing import Any

#: Bytes per parameter by quantisation label (:func:`audit.kb.geometry.detect_quantization`).
#: 4-bit schemes carry a scale per group of 16/32/128 weights: NVFP4 4.5 bits (FP8 scale per
#: 16), MXFP4 4.25 bits (E8M0 per 32), AWQ/GPTQ ~4.25 bits (FP16 scale+zero per 128).
BYTES_PER_PARAM = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0,
                   "awq": 0.53, "gptq": 0.53, "int4": 0.53, "qat-w4a16": 0.53,
                   "bnb-4bit": 0.55, "nvfp4": 0.5625, "mxfp4": 0.53, "gguf": 0.6}


def _n(cfg: dict[str, Any], *keys: str) -> int:
    for key in keys:
        value = cfg.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            return int(value)
    return 0


def _attention_params(cfg: dict[str, Any], geom: dict[str, Any], kind: str) -> int:
    hidden, heads = geom["hidden_size"] or 0, geom["num_attention_heads"] or 0
    if kind == "mla":
        q_rank, kv_rank = _n(cfg, "q_lora_rank"), geom["kv_lora_rank"] or 0
        nope, rope = _n(cfg, "qk_nope_head_dim"), geom["qk_rope_head_dim"] or 0
        v_dim = _n(cfg, "v_head_dim") or nope
        q = hidden * q_rank + q_rank * heads * (nope + rope) if q_rank \
            else hidden * heads * (nope + rope)
        return q + hidden * (kv_rank + rope) + kv_rank * heads * (nope + v_dim) \
            + heads * v_dim * hidden
    if kind == "linear":
        nk, dk = _n(cfg, "linear_num_key_heads"), _n(cfg, "linear_key_head_dim")
        nv, dv = _n(cfg, "linear_num_value_heads"), _n(cfg, "linear_value_head_dim")
        return hidden * (2 * nk * dk + 2 * nv * dv) + nv * dv * hidden
    if kind == "mamba":
        inner = _n(cfg, "mamba_num_heads", "mamba_n_heads") * _n(cfg, "mamba_head_dim") \
            or _n(cfg, "mamba_expand", "expand") * hidden
        state = _n(cfg, "ssm_state_size", "mamba_d_state", "state_size")
        groups = _n(cfg, "mamba_n_groups", "n_groups") or 1
        return hidden * (2 * inner + 2 * groups * state) + inner * hidden
    if kind == "none":
        return 0
    full = kind == "full"
    head_dim = (geom["global_head_dim"] if full else geom["head_dim"]) or 0
    kv = (geom["global_kv_heads"] if full else geom["kv_heads"]) or 0
    return 2 * hidden * heads * head_dim + 2 * hidden * kv * head_dim


def _mlp_params(cfg: dict[str, Any], geom: dict[str, Any]) -> tuple[int, int, int]:
    """(dense layer MLP, MoE layer MLP total, MoE layer MLP active) parameters."""
    hidden = geom["hidden_size"] or 0
    dense = 3 * hidden * _n(cfg, "intermediate_size", "ffn_hidden_size")
    if not geom["is_moe"]:
        return dense, dense, dense
    expert = 3 * hidden * (_n(cfg, "moe_intermediate_size", "expert_intermediate_size")
                           or _n(cfg, "intermediate_size"))
    shared_size = _n(cfg, "shared_expert_intermediate_size") \
        or _n(cfg, "n_shared_experts", "num_shared_experts") * _n(cfg, "moe_intermediate_size")
    shared = 3 * hidden * shared_size
    router = hidden * geom["experts"]
    total = geom["experts"] * expert + shared + router
    active = (geom["active_experts"] or 1) * expert + shared + router
    return dense, total, active


def _dense_layer_count(cfg: dict[str, Any], geom: dict[str, Any]) -> int:
    if not geom["is_moe"]:
        return geom["layers"] or 0
    only = cfg.get("mlp_only_layers")
    return _n(cfg, "first_k_dense_replace") + (len(only) if isinstance(only, list) else 0)


def expert_params(cfg: dict[str, Any], geom: dict[str, Any]) -> float | None:
    """Billions of parameters in routed experts (what expert parallelism shards), or None."""
    if not geom["is_moe"] or not geom["layers"] or not geom["hidden_size"]:
        return None
    size = _n(cfg, "moe_intermediate_size", "expert_intermediate_size") \
        or _n(cfg, "intermediate_size")
    moe_layers = geom["layers"] - min(_dense_layer_count(cfg, geom), geom["layers"])
    return round(geom["experts"] * 3 * geom["hidden_size"] * size * moe_layers / 1e9, 2) \
        if size else None


def estimate_params(cfg: dict[str, Any], geom: dict[str, Any]) -> tuple[float | None,
                                                                       float | None]:
    """(total, active) parameters in billions, None when the shapes are missing."""
    layers, hidden, vocab = geom["layers"], geom["hidden_size"], _n(cfg, "vocab_size")
    if not layers or not hidden or not vocab or not geom["num_attention_heads"] \
            or not _n(cfg, "intermediate_size", "moe_intermediate_size", "ffn_hidden_size"):
        return None, None
    embed = vocab * hidden * (1 if cfg.get("tie_word_embeddings") else 2)
    kinds = _kinds(geom)
    attention = sum(_attention_params(cfg, geom, kind) for kind in kinds)
    dense, moe_total, moe_active = _mlp_params(cfg, geom)
    dense_layers = min(_dense_layer_count(cfg, geom), layers)
    moe_layers = layers - dense_layers
    total = embed + attention + dense_layers * dense + moe_layers * moe_total
    active = embed + attention + dense_layers * dense + moe_layers * moe_active
    return round(total / 1e9, 2), round(active / 1e9, 2)


def _kinds(geom: dict[str, Any]) -> list[str]:
    counts = geom["layer_counts"]
    kinds = [k for k, n in counts.items() for _ in range(n)]
    return kinds + ["none"] * max(0, (geom["layers"] or 0) - len(kinds))
