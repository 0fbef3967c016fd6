"""Assemble one release's table (``audit/kb/data/vllm/<release>.json``) from extracted facts.

Input is the shape the static reader (:mod:`audit.kb.vllm_extract.source`) and the vLLM
ground truth share: ``flags`` {"--flag": {dest, type, default, aliases?, negative_forms?,
choices?, nargs?, action?, const?, deprecated, config_field?}}, ``batch`` {table,
device_probe, scheduler_config_fallbacks, config_field_defaults, max_model_len},
``metrics`` {"vllm:name": {type, labels, exposed_as, scope, default_exported}}, ``spec``
{methods, fields}, optional ``config_keys`` {ConfigClass: [field, …]}.

Output (stable, sorted keys) — see README "vLLM releases as data":

* ``options``: {"--flag": {dest, type, takes (none|one|optional|many), default, choices,
  deprecated, spellings (every accepted spelling, ``_`` forms included), negative (spellings
  that set False), config_keys (JSON keys of config-valued flags) }}
* ``batch_defaults``: [{when (tree, :mod:`.conditions`), when_source, max_num_seqs,
  max_num_batched_tokens}] for the API server (``OPENAI_API_SERVER``) and ``LLM`` class;
* ``config_defaults``: gpu_memory_utilization, block_size, enable_prefix_caching,
  enable_chunked_prefill, kv_cache_dtype, max_model_len; ``max_model_len``: how it defaults;
* ``speculative``: {methods, config_keys}; ``metrics``: {name: {type, labels, exposed_as,
  default_exported, scope}}.
"""

from __future__ import annotations

import re
from typing import Any

from audit.kb.vllm_extract.conditions import probe_bindings, to_tree

FORMAT = 1
_CONFIG_FIELDS = {
    "gpu_memory_utilization": "CacheConfig.gpu_memory_utilization",
    "block_size": "CacheConfig.block_size",
    "enable_prefix_caching": "CacheConfig.enable_prefix_caching",
    "kv_cache_dtype": "CacheConfig.cache_dtype",
    "enable_chunked_prefill": "SchedulerConfig.enable_chunked_prefill",
    "max_model_len": "ModelConfig.max_model_len",
}


def takes(record: dict[str, Any]) -> str:
    """How many argv tokens the option consumes: none | one | optional | many."""
    kind, nargs = record.get("type", ""), record.get("nargs")
    if kind in ("bool", "flag(store_true)") or record.get("action") in (
            "store_true", "store_false", "BooleanOptionalAction", "store_const"):
        return "none"
    if nargs == "+" or nargs == "*" or kind.startswith("list["):
        return "many"
    if nargs == "?" or kind == "str?":
        return "optional"
    return "one"


def spellings(flag: str, record: dict[str, Any]) -> list[str]:
    """Every spelling that sets the option (positive forms), underscore variants included:
    vLLM's FlexibleArgumentParser turns ``_`` into ``-`` in long option names."""
    if not flag.startswith("-"):
        return []
    found = [flag, *record.get("aliases", [])]
    found += [s.replace("-", "_").replace("__", "--", 1) for s in found if s.startswith("--")]
    return sorted(dict.fromkeys(found))


def negatives(record: dict[str, Any]) -> list[str]:
    """Spellings that set the option False (``--no-x``, 0.33's ``--disable-x``), with ``_``."""
    found = list(record.get("negative_forms", []))
    found += [s.replace("-", "_").replace("__", "--", 1) for s in found]
    return sorted(dict.fromkeys(found))


def _json_safe(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return repr(value)


def _config_class(record: dict[str, Any]) -> str | None:
    match = re.fullmatch(r"json\((\w+)\)", record.get("type", ""))
    if match:
        return match[1]
    field = record.get("config_field") or ""
    return {"VllmConfig.speculative_config": "SpeculativeConfig"}.get(field)


def option(flag: str, record: dict[str, Any], config_keys: dict[str, list[str]]) -> dict:
    """One shipped option entry (see module docstring)."""
    klass = _config_class(record)
    return {
        "dest": record.get("dest"), "type": record.get("type"), "takes": takes(record),
        "default": _json_safe(record.get("default")), "choices": record.get("choices"),
        "deprecated": bool(record.get("deprecated")), "spellings": spellings(flag, record),
        "negative": negatives(record), "config_class": klass,
        "config_keys": sorted(config_keys.get(klass, [])) if klass else [],
    }


def _per_entrypoint(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return {"api_server": value.get("OPENAI_API_SERVER"), "llm": value.get("LLM_CLASS")}
    return {"api_server": value, "llm": value}


def batch_rows(batch: dict[str, Any]) -> list[dict[str, Any]]:
    """``get_batch_defaults()`` branches with evaluable conditions, in source order."""
    bindings = probe_bindings(batch.get("device_probe") or [])
    rows = []
    for branch in batch.get("table") or []:
        rows.append({
            "function": branch.get("function"), "when_source": branch.get("when"),
            "when": to_tree(branch.get("when") or "False", bindings),
            "max_num_seqs": _per_entrypoint(branch.get("max_num_seqs")),
            "max_num_batched_tokens": _per_entrypoint(branch.get("max_num_batched_tokens")),
        })
    return rows


def config_defaults(batch: dict[str, Any]) -> dict[str, Any]:
    """The config-class defaults that matter, by flag name (None = resolved at start)."""
    fields = batch.get("config_field_defaults") or {}
    out = {}
    for name, field in _CONFIG_FIELDS.items():
        value = fields.get(field)
        out[name] = None if isinstance(value, str) and value.startswith("<expr") else value
    return out


def build_table(release: str, flags: dict, batch: dict, metrics: dict, spec: dict,
                provenance: dict | None = None,
                config_keys: dict[str, list[str]] | None = None) -> dict[str, Any]:
    """One release's table (module docstring); pure, JSON-able, deterministic."""
    keys = dict(config_keys or {})
    keys.setdefault("SpeculativeConfig", list(spec.get("fields") or []))
    return {
        "format": FORMAT, "release": release, "provenance": provenance or {},
        "options": {flag: option(flag, rec, keys) for flag, rec in sorted(flags.items())},
        "batch_defaults": batch_rows(batch),
        "scheduler_fallbacks": {k: v for k, v in (batch.get("scheduler_config_fallbacks")
                                                  or {}).items() if isinstance(v, int)},
        "config_defaults": config_defaults(batch),
        "max_model_len": {k: v for k, v in (batch.get("max_model_len") or {}).items()
                          if k in ("flag_type", "caps_by_tokenizer_model_max_length",
                                   "fallback_when_no_key", "minus_one_means_auto_fit",
                                   "rope_scaling_applied", "possible_keys")},
        "speculative": {"methods": sorted(spec.get("methods") or []),
                        "config_keys": sorted(spec.get("fields") or [])},
        "metrics": {name: {k: m.get(k) for k in ("type", "labels", "exposed_as", "scope",
                                                  "default_exported")}
                    for name, m in sorted(metrics.items())},
    }
