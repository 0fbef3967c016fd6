"""Context pieces built on the model decision: ``model.files``, ``model.arch``, ``memory``.

``model.files`` (from the report's ``servers[].model_files``): ``available`` (a config was
read), ``source``, ``weights_bytes``, ``weights_dtype``, ``speculator_weights_bytes``,
``errors``.

``model.arch``: :func:`audit.kb.modelcfg.geometry_from_config` of the decided config, plus
``source`` (``config.json from the node`` / ``catalogue <key>: <url>`` / ``model name
(estimate)`` / None), ``estimate`` (parameters from the name only) and
``derived_max_model_len`` (what vLLM uses when ``--max-model-len`` is unset).

``memory``: :func:`audit.kb.memory.memory_budget` for this server's GPUs and flags.
"""

from __future__ import annotations

from typing import Any

from audit.kb.catalogue import params_from_name
from audit.kb.geometry import _QUANT_FLAG_MAP, drafter_gib, weight_gib
from audit.kb.memory import derived_max_model_len, memory_budget
from audit.kb.modelcfg import as_table_row, geometry_from_config

_GIB = 2**30


def files_block(files: Any) -> dict[str, Any]:
    """The node's ``model_files`` reduced to what rules read (``config`` kept for the
    decision, dropped from the context by the caller)."""
    files = files if isinstance(files, dict) else {}
    config = files.get("config") if isinstance(files.get("config"), dict) else None
    spec = files.get("speculator") if isinstance(files.get("speculator"), dict) else {}
    return {"available": config is not None, "config": config, "source": files.get("source"),
            "weights_bytes": _bytes(files.get("weights_bytes")),
            "weights_dtype": files.get("weights_dtype"),
            "quantization_config": files.get("quantization_config")
            if isinstance(files.get("quantization_config"), dict) else None,
            "speculator_weights_bytes": _bytes(spec.get("weights_bytes")),
            "errors": [e for e in files.get("errors") or [] if isinstance(e, str)]}


def _bytes(value: Any) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
    return value if ok else None


def quant_from_config(flag: str | None, config: dict[str, Any] | None
                      ) -> tuple[str | None, str | None]:
    """Quantisation label from ``config.json``'s ``quantization_config`` when no flag names
    one; (None, None) otherwise."""
    if flag or not isinstance(config, dict):
        return None, None
    quant = config.get("quantization_config")
    method = quant.get("quant_method") if isinstance(quant, dict) else None
    if isinstance(method, str) and method.lower() in _QUANT_FLAG_MAP:
        label = _QUANT_FLAG_MAP[method.lower()]
        return label, f"config.json quantization_config.quant_method {method}"
    return None, None


def model_arch(decision: dict[str, Any]) -> dict[str, Any]:
    """``model.arch`` plus ``_table_row`` (the row :func:`geometry_context` sizes)."""
    geom = geometry_from_config(decision["config"])
    geom.update(source=decision["config_source"], estimate=False,
                derived_max_model_len=derived_max_model_len(geom))
    table = decision["table_row"]
    from_node = (decision["config_source"] or "").startswith("config.json")
    table_has_geometry = bool(table and table.get("layers") and table.get("kv_heads"))
    weights = (table or {}).get("weights_gb")
    if geom["known"] and (from_node or not table_has_geometry):
        geom["_table_row"] = {**(table or {}), **as_table_row(geom, weights)}
    else:  # the hand-sourced table row wins over a catalogue entry for the same name
        geom["_table_row"] = table
        if table_has_geometry and not from_node:
            geom["derived_max_model_len"] = None  # the table's own default applies
    if not geom["known"] and geom["params_b"] is None:
        total, active = params_from_name(*decision.get("hints", []))
        if total:
            geom.update(params_b=total, active_params_b=active, estimate=True,
                        source="model name (estimate)")
    return geom


def memory_block(model: dict[str, Any], flags: dict[str, Any], *, tp: int, pp: int,
                 gpu: dict[str, Any], engine_cache: dict[str, Any],
                 row: dict[str, Any] | None = None) -> dict[str, Any]:
    """``memory`` for one server (see :mod:`audit.kb.memory`)."""
    arch, files = model["arch"], model["files"]
    weights, source = files["weights_bytes"], None
    if weights is None and row is not None:  # a sourced table figure beats a shape estimate
        table_gib = weight_gib(row, model["quantization"])
        weights = int(table_gib * _GIB) if table_gib else None
        source = f"models.yaml {row.get('key')} weights_gb" if weights else None
    spec = model["speculative"]
    drafter = files["speculator_weights_bytes"] or int(drafter_gib(spec.get("model")) * _GIB)
    util = flags.get("gpu_memory_utilization")
    return memory_budget(
        arch, weights_bytes=weights, quant=model["quantization"], drafter_bytes=drafter,
        tp=tp, pp=pp, memory_gib=gpu.get("min_memory_gib"),
        util=util if isinstance(util, float) else None,
        kv_cache_dtype=flags.get("kv_cache_dtype"),
        max_model_len=_int(flags.get("max_model_len")),
        max_num_batched_tokens=_int(flags.get("max_num_batched_tokens")),
        chunked_prefill=flags.get("enable_chunked_prefill"),
        block_size=_int(flags.get("block_size")),
        draft_tp=_int(spec.get("draft_tensor_parallel_size")), engine_cache=engine_cache,
        weights_source=source,
        ep_shards=(_int(flags.get("data_parallel_size")) or 1)
        if flags.get("enable_expert_parallel") is True else 1)


def _int(value: Any) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
    return value if ok else None
