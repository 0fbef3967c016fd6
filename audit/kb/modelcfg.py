"""Decoder geometry of any Hugging Face model from its ``config.json``.

:func:`geometry_from_config` turns a parsed ``config.json`` (what the agent sends as
``servers[].model_files.config``, a catalogue entry, or a test fixture) into one flat dict:

* layers by the kind of cache they hold: ``full`` (attention over every token), ``sliding``
  (a window; also Llama 4's chunked attention), ``mla`` (a compressed latent per token),
  ``linear`` (gated delta-net / linear attention: a fixed state per sequence), ``mamba``
  (SSM: a fixed state per sequence). Counted from ``layer_types``, else
  ``hybrid_override_pattern`` (Nemotron-H), ``full_attention_interval`` (Qwen3-Next/3.5),
  ``attn_layer_period``/``attn_layer_offset`` (Jamba), ``sliding_window_pattern``
  (Gemma 3), a model-wide ``sliding_window`` (Mistral; not when ``use_sliding_window`` is
  false, as in Qwen2), else every layer full;
* attention heads, KV heads and head_dim per kind (Gemma 4: ``num_global_key_value_heads``
  and ``global_head_dim`` on full layers), the sliding window, MLA ``kv_lora_rank`` +
  ``qk_rope_head_dim``, sparse MLA (``index_topk``: DeepSeek V3.2 / GLM-5 DSA);
* the per-sequence state of linear/Mamba layers in elements (conv + SSM, vLLM's
  ``MambaSpec`` shapes: conv ``(kernel-1) x channels``, SSM ``heads x head_dim x d_state``);
* MoE experts and active experts, the native context (``max_position_embeddings``) and rope
  scaling, a vision tower, and a parameter estimate (total and active, from the matrix shapes).

Multimodal configs nest the decoder under ``text_config`` (Gemma 3/4, Qwen3.5, Llama 4),
``llm_config`` or ``language_config``: those fields win over the top level. Nothing here
raises on odd input: a missing or non-numeric field is None and ``known`` says whether the
KV geometry is complete.
"""

from __future__ import annotations

from typing import Any

from audit.kb.modelparams import estimate_params, expert_params

_TEXT_KEYS = ("text_config", "llm_config", "language_config", "thinker_config")
_KIND = {"full_attention": "full", "attention": "full", "global": "full",
         "sliding_attention": "sliding", "chunked_attention": "sliding", "local": "sliding",
         "linear_attention": "linear", "mamba": "mamba", "mamba2": "mamba"}
_MAMBA_ONLY = {"mamba", "mamba2", "falcon_mamba"}
#: More layers than any published decoder (~200): a config above it is treated as unknown
#: rather than expanded layer by layer (the node's config is untrusted input).
MAX_LAYERS = 4096


def _num(value: Any) -> int | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
    return int(value) if ok else None


def _first(cfg: dict[str, Any], *keys: str) -> int | None:
    for key in keys:
        value = _num(cfg.get(key))
        if value is not None:
            return value
    return None


def text_config(config: dict[str, Any]) -> dict[str, Any]:
    """The decoder's fields: the nested text config over the top level."""
    merged = dict(config)
    for key in _TEXT_KEYS:
        nested = config.get(key)
        if isinstance(nested, dict):
            merged.update(nested)
            merged["_text_model_type"] = nested.get("model_type")
            break
    merged["model_type"] = config.get("model_type") or merged.get("model_type")
    return merged


def _layer_kinds(cfg: dict[str, Any], layers: int) -> list[str]:
    """One kind per layer (see module docstring for the order of the sources)."""
    types = cfg.get("layer_types")
    if isinstance(types, list) and types:
        return [_KIND.get(str(t).lower(), "full") for t in types[:layers]]
    pattern = cfg.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:
        # Nemotron-H: M = Mamba2, * = attention, - = MLP, E = MoE (no cache of their own).
        return [{"M": "mamba", "*": "full"}.get(ch, "none") for ch in pattern[:layers]]
    if str(cfg.get("model_type")) in _MAMBA_ONLY:
        return ["mamba"] * layers
    interval = _num(cfg.get("full_attention_interval"))
    if interval and (cfg.get("linear_num_value_heads") or cfg.get("linear_key_head_dim")):
        return ["full" if (i + 1) % interval == 0 else "linear" for i in range(layers)]
    period, offset = _num(cfg.get("attn_layer_period")), cfg.get("attn_layer_offset")
    if period and isinstance(offset, int):
        return ["full" if i % period == offset else "mamba" for i in range(layers)]
    return _sliding_kinds(cfg, layers)


def _sliding_kinds(cfg: dict[str, Any], layers: int) -> list[str]:
    window = _num(cfg.get("sliding_window")) or _num(cfg.get("attention_chunk_size"))
    if not window or cfg.get("use_sliding_window") is False:
        return ["full"] * layers
    pattern = _num(cfg.get("sliding_window_pattern"))
    if pattern:  # Gemma 3: every pattern-th layer is global
        return ["full" if (i + 1) % pattern == 0 else "sliding" for i in range(layers)]
    return ["sliding"] * layers


def _state_elements(cfg: dict[str, Any], kind: str) -> tuple[int, int] | None:
    """(conv elements, SSM elements) per sequence per layer at TP=1, None when unknown."""
    if kind == "linear":
        nk, dk = _first(cfg, "linear_num_key_heads"), _first(cfg, "linear_key_head_dim")
        nv, dv = _first(cfg, "linear_num_value_heads"), _first(cfg, "linear_value_head_dim")
        kernel = _first(cfg, "linear_conv_kernel_dim") or 4
        if not (nk and dk and nv and dv):
            return None
        return (kernel - 1) * (2 * nk * dk + nv * dv), nv * dk * dv
    d_state = _first(cfg, "ssm_state_size", "mamba_d_state", "state_size", "d_state")
    d_conv = _first(cfg, "conv_kernel", "mamba_d_conv", "d_conv") or 4
    heads = _first(cfg, "mamba_num_heads", "mamba_n_heads")
    head_dim = _first(cfg, "mamba_head_dim", "mamba_d_head")
    if heads and head_dim and d_state:  # Mamba2
        groups = _first(cfg, "mamba_n_groups", "n_groups") or 1
        inner = heads * head_dim
        return (d_conv - 1) * (inner + 2 * groups * d_state), heads * head_dim * d_state
    hidden, expand = _first(cfg, "hidden_size"), _first(cfg, "mamba_expand", "expand")
    inner = _first(cfg, "intermediate_size") if str(cfg.get("model_type")) in _MAMBA_ONLY \
        else (hidden * expand if hidden and expand else None)
    if inner and d_state:  # Mamba1 (Jamba, falcon_mamba)
        return (d_conv - 1) * inner, inner * d_state
    return None


def _moe(cfg: dict[str, Any]) -> tuple[int | None, int | None]:
    experts = _first(cfg, "num_experts", "n_routed_experts", "num_routed_experts",
                     "num_local_experts", "moe_num_experts")
    active = _first(cfg, "num_experts_per_tok", "experts_per_token", "moe_topk", "top_k")
    return (experts, active) if experts and experts > 1 else (None, None)


def _rope(cfg: dict[str, Any]) -> dict[str, Any] | None:
    rope = cfg.get("rope_scaling")
    if not isinstance(rope, dict):
        return None
    kind = rope.get("rope_type") or rope.get("type")
    if kind in (None, "default"):
        return None
    return {"type": kind, "factor": rope.get("factor"),
            "original_max_position_embeddings": rope.get("original_max_position_embeddings")}


def _empty() -> dict[str, Any]:
    keys = ("model_type", "text_model_type", "architectures", "layers", "num_attention_heads",
            "kv_heads", "head_dim", "global_kv_heads", "global_head_dim", "sliding_window",
            "kv_lora_rank", "qk_rope_head_dim", "experts", "active_experts",
            "max_position_embeddings", "rope_scaling", "torch_dtype", "quant_method",
            "params_b", "active_params_b", "hidden_size", "conv_state_elements",
            "ssm_state_elements", "ssm_state_dtype_bytes", "intermediate_size",
            "moe_intermediate_size", "expert_params_b")
    out: dict[str, Any] = dict.fromkeys(keys)
    out.update(known=False, layer_counts={"full": 0, "sliding": 0, "mla": 0, "linear": 0,
                                          "mamba": 0}, is_mla=False, is_sparse_mla=False,
               is_hybrid=False, is_moe=False, multimodal=False, heterogeneous_head_dim=False,
               head_dims=[])
    return out


def geometry_from_config(config: dict[str, Any] | None) -> dict[str, Any]:
    """Geometry dict (keys of :func:`_empty`) from a parsed ``config.json``.

    Units: heads and dims are counts; ``*_state_elements`` are elements per sequence per
    layer at TP=1; ``params_b`` is billions of parameters (estimate from shapes).
    """
    out = _empty()
    if not isinstance(config, dict):
        return out
    cfg = text_config(config)
    out.update(model_type=cfg.get("model_type"), text_model_type=cfg.get("_text_model_type"),
               architectures=[a for a in config.get("architectures") or []
                              if isinstance(a, str)][:8]
               if isinstance(config.get("architectures"), list) else [],
               multimodal=any(isinstance(config.get(k), dict) for k in
                              ("vision_config", "audio_config", "vision_tower")),
               hidden_size=_first(cfg, "hidden_size", "d_model", "n_embd"),
               max_position_embeddings=_first(cfg, "max_position_embeddings", "n_positions",
                                              "max_sequence_length", "seq_length"),
               rope_scaling=_rope(cfg), torch_dtype=cfg.get("torch_dtype") or cfg.get("dtype"))
    quant = config.get("quantization_config")
    out["quant_method"] = quant.get("quant_method") if isinstance(quant, dict) else None
    _attention(out, cfg)
    out["intermediate_size"] = _first(cfg, "intermediate_size", "ffn_hidden_size")
    out["moe_intermediate_size"] = _first(cfg, "moe_intermediate_size")
    out["experts"], out["active_experts"] = _moe(cfg)
    out["is_moe"] = out["experts"] is not None
    _states(out, cfg)
    out["params_b"], out["active_params_b"] = estimate_params(cfg, out)
    out["expert_params_b"] = expert_params(cfg, out) if out["params_b"] else None
    return out


def _attention(out: dict[str, Any], cfg: dict[str, Any]) -> None:
    layers = _first(cfg, "num_hidden_layers", "n_layer", "num_layers", "n_layers")
    heads = _first(cfg, "num_attention_heads", "n_head", "num_heads")
    out.update(layers=layers, num_attention_heads=heads)
    if not layers or layers > MAX_LAYERS:
        return
    hidden = out["hidden_size"]
    head_dim = _first(cfg, "head_dim", "kv_channels") or (hidden // heads if hidden and heads
                                                           else None)
    kv_heads = _first(cfg, "num_key_value_heads", "num_kv_heads", "n_head_kv") or heads
    if cfg.get("multi_query") is True:
        kv_heads = 1
    kinds = _layer_kinds(cfg, layers)
    if _num(cfg.get("kv_lora_rank")):
        kinds = ["mla" if k in ("full", "sliding") else k for k in kinds]
        out.update(is_mla=True, kv_lora_rank=_num(cfg["kv_lora_rank"]),
                   qk_rope_head_dim=_num(cfg.get("qk_rope_head_dim")) or 64,
                   is_sparse_mla=_num(cfg.get("index_topk")) is not None)
    for kind in kinds:
        if kind in out["layer_counts"]:
            out["layer_counts"][kind] += 1
    out.update(head_dim=head_dim, kv_heads=kv_heads,
               global_kv_heads=_first(cfg, "num_global_key_value_heads") or kv_heads,
               global_head_dim=_first(cfg, "global_head_dim") or head_dim,
               sliding_window=(_num(cfg.get("sliding_window"))
                               or _num(cfg.get("attention_chunk_size")))
               if out["layer_counts"]["sliding"] else None)
    dims = sorted({d for d in (head_dim if out["layer_counts"]["sliding"] else None,
                               out["global_head_dim"] if out["layer_counts"]["full"] else None)
                   if d})
    out["head_dims"] = dims
    out["heterogeneous_head_dim"] = len(dims) > 1
    counts = out["layer_counts"]
    out["is_hybrid"] = bool(counts["linear"] or counts["mamba"])
    attention_known = bool(out["is_mla"] or (kv_heads and head_dim))
    out["known"] = attention_known or (counts["mamba"] == layers)


def _states(out: dict[str, Any], cfg: dict[str, Any]) -> None:
    counts = out["layer_counts"]
    kind = "linear" if counts["linear"] else ("mamba" if counts["mamba"] else None)
    if kind is None:
        return
    found = _state_elements(cfg, kind)
    if found is None:
        out["known"] = False
        return
    out["conv_state_elements"], out["ssm_state_elements"] = found
    ssm_dtype = str(cfg.get("mamba_ssm_dtype") or cfg.get("mamba_ssm_cache_dtype") or "")
    out["ssm_state_dtype_bytes"] = 4 if "32" in ssm_dtype else None


def as_table_row(geom: dict[str, Any], weights_gb: dict[str, float] | None = None
                 ) -> dict[str, Any]:
    """The geometry in ``models.yaml`` row terms, for :mod:`audit.kb.geometry`'s KV sizing.

    Only full and sliding attention layers map onto that table (MLA, linear and Mamba layers
    are sized by :mod:`audit.kb.memory`): a model with such layers gets no ``kv_heads`` here,
    so the Gemma-era estimates stay None rather than wrong."""
    counts = geom["layer_counts"]
    row = {"layers": geom["layers"], "sliding_layers": counts["sliding"],
           "global_layers": counts["full"], "num_attention_heads": geom["num_attention_heads"],
           "sliding_window": geom["sliding_window"],
           "max_position_embeddings": geom["max_position_embeddings"],
           "multimodal": geom["multimodal"], "moe": geom["is_moe"]}
    if not (geom["is_mla"] or geom["is_hybrid"]):
        row.update(kv_heads=geom["kv_heads"], head_dim=geom["head_dim"],
                   global_kv_heads=geom["global_kv_heads"],
                   global_head_dim=geom["global_head_dim"])
    if weights_gb:
        row["weights_gb"] = weights_gb
    return row
