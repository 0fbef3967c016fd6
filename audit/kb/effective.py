"""Effective engine configuration: argv values + the defaults of the running vLLM release.

Defaults come from the release's table (``audit/kb/data/vllm/<release>.json``, see
:mod:`audit.kb.vllm_tables`): every option's argparse default, the config-class defaults
(gpu_memory_utilization, enable_prefix_caching, enable_chunked_prefill, kv_cache_dtype) and
``get_batch_defaults()`` evaluated for the server's GPU (memory, name, compute capability).
Versions older than the oldest table (0.8.5) keep the hand-sourced rules below.

Every value carries a source: ``meta["source"][key]`` in {"argv", "default", "derived"} and
``meta["sources"][key]``, a sentence saying which default or derivation it is.
"""

from __future__ import annotations

import math
from typing import Any

from packaging.version import Version

from audit.kb.flags import ParsedArgv, not_accepted
from audit.kb.flags_defaults import REMOVED_FLAGS
from audit.kb.paths import per_kb
from audit.kb.versions import version_tuple
from audit.kb.vllm_tables import batch_defaults_for, releases, table, table_release

_V = Version
# The V1 engine became the default in 0.8.0 (case 010: maintainer on vllm#15228).
_V1_DEFAULT = _V("0.8.0")
# Before 0.8.5 (the oldest table) V1 used 1024 seqs on every GPU (cases 010, 011: "warming up
# sampler with 1024 dummy requests" on a 24 GB RTX 4090 with 0.8.2) and 8192 API-server
# tokens only on H100/H200 names (https://github.com/vllm-project/vllm/pull/12369).


def _oldest() -> Version:
    return _V(releases()[0])


def _platform(gpu_name: str | None, vendor: str | None) -> str:
    lowered = f"{vendor or ''} {gpu_name or ''}".lower()
    return "rocm" if any(w in lowered for w in ("amd", "instinct", "radeon")) else "cuda"


def _capability(cc: Any) -> list[int] | None:
    """``"12.1"`` / ``12.1`` / ``[12, 1]`` -> [12, 1]; None when unknown."""
    if isinstance(cc, (list, tuple)) and len(cc) >= 2:
        return [int(cc[0]), int(cc[1])]
    try:
        major, _, minor = str(cc).partition(".")
        return [int(major), int(minor or 0)] if cc not in (None, "") else None
    except ValueError:
        return None


def batch_defaults(version: Version | None, gpu_memory_gib: float | None,
                   gpu_name: str | None, gpu_cc: Any = None,
                   gpu_vendor: str | None = None) -> tuple[int, int | None, str]:
    """vLLM's default (max_num_seqs, max_num_batched_tokens, rule) for the API server.

    ``gpu_memory_gib`` / ``gpu_name`` / ``gpu_cc`` ("12.1") describe device 0 as NVML reports
    it. From 0.8.5: the ``get_batch_defaults()`` branch of the release's table (unknown
    version -> newest table; unknown memory -> smallest tier). Before: V0 (< 0.8.0) 256 seqs
    and tokens None; 0.8.0-0.8.4 1024 seqs, 8192 tokens on H100/H200 names else 2048.
    """
    name = (gpu_name or "").lower()
    if version is not None and version < _V1_DEFAULT:
        return 256, None, "V0 engine (< 0.8.0): max_num_seqs 256"
    if version is not None and version < _oldest():
        big = "h100" in name or "h200" in name
        return 1024, 8192 if big else 2048, "V1 0.8.0-0.8.4: 1024 seqs (vllm#15228), " \
            "8192 tokens on H100/H200 names else 2048 (vllm#12369)"
    release, _ = table_release(str(version) if version is not None else None)
    found = batch_defaults_for(release, {
        "memory_gib": gpu_memory_gib, "name": name, "capability": _capability(gpu_cc),
        "platform": _platform(gpu_name, gpu_vendor)})
    branch = found["branch"] or "no branch matched: SchedulerConfig fallback"
    rule = f"{found['function']}() of vLLM {release}: {branch}"
    if found["note"]:
        rule += f" ({found['note']})"
    return found["max_num_seqs"], found["max_num_batched_tokens"], rule


def default_gpu_memory_utilization(version: Version | None) -> tuple[float, str]:
    """CacheConfig.gpu_memory_utilization of the release's table (0.92 from 0.20.0, 0.9
    before); before the oldest table 0.9."""
    if version is not None and version < _oldest():
        return 0.9, "default (0.9 before vLLM 0.8.5)"
    release, _ = table_release(str(version) if version is not None else None)
    value = table(release)["config_defaults"]["gpu_memory_utilization"]
    return value, f"default (CacheConfig.gpu_memory_utilization of vLLM {release})"


_STATIC_DEFAULTS: dict[str, Any] = {
    "model": None, "served_model_name": None, "tensor_parallel_size": 1,
    "pipeline_parallel_size": 1, "data_parallel_size": 1, "max_model_len": None,
    "kv_cache_dtype": "auto", "quantization": None, "dtype": "auto", "enforce_eager": False,
    "attention_backend": None, "reasoning_parser": None, "tool_call_parser": None,
    "enable_auto_tool_choice": False, "chat_template": None, "revision": None,
    "trust_remote_code": False, "language_model_only": False, "limit_mm_per_prompt": {},
    "speculative_config": None, "default_chat_template_kwargs": None,
    "disable_log_stats": False, "block_size": 16, "port": 8000, "host": None, "uds": None,
    "cpu_offload_gb": 0.0, "swap_space": None, "enable_lora": False, "tokenizer_mode": "auto",
    "async_scheduling": None, "compilation_config": None, "hf_overrides": None,
    "mm_processor_kwargs": None, "enable_expert_parallel": False, "kv_transfer_config": None,
    "trust_request_chat_template": False, "max_lora_rank": None, "optimization_level": None,
    "generation_config": None, "load_format": None, "tokenizer": None, "seed": None,
    "enable_log_requests": False, "disable_log_requests": False, "enable_reasoning": False,
}
# Keys every context has (rules read them), whatever the release. block_size 16: CUDA's
# resolved default (CacheConfig.block_size is None in the tables: the platform sets it).
# Table defaults are applied on top only for scalar values (int/float/bool/non-empty str):
# "" / {} / unevaluated expressions keep the neutral value above.


@per_kb
def _table_defaults(release: str) -> dict[str, tuple[Any, str]]:
    """dest -> (default, flag) for every option of ``release`` with a scalar default
    (memoised per KB: read, never modified)."""
    out = {}
    for flag, opt in table(release)["options"].items():
        value, dest = opt["default"], opt["dest"]
        if dest == "model_tag" or dest == "model" or value is None or value == "" \
                or isinstance(value, (dict, list)):
            continue
        if isinstance(value, str) and value.startswith("<expr"):
            continue
        out[dest] = (value, flag)
    return out


def _config_defaults(release: str) -> dict[str, Any]:
    values = dict(table(release)["config_defaults"])
    values.pop("max_model_len", None)
    values.pop("block_size", None)
    return {k: v for k, v in values.items() if v is not None}


def _category(source: str) -> str:
    if source == "argv":
        return "argv"
    return "default" if source.startswith("default") else "derived"


def effective_flags(parsed: ParsedArgv, version: str | None, gpu_memory_gib: float | None,
                    gpu_name: str | None, gpu_cc: Any = None, gpu_vendor: str | None = None,
                    installed: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Effective config = argv values + the running release's defaults for the rest.

    Args: ``parsed`` from :func:`audit.kb.flags.parse_argv`; ``version`` normalised PEP 440
    (or None); GPU facts of the server's first GPU (None when unknown); ``installed`` the
    installed (next-restart) version when it differs.
    Returns ``(flags, meta)``: ``flags`` keyed by option dest; ``meta`` has ``set``,
    ``sources`` (sentence per key), ``source`` (argv | default | derived per key),
    ``release`` / ``release_note`` (table used), ``unknown``, ``not_accepted`` (options the
    running release refuses), ``removed`` (those of them a previous release accepted),
    ``rejected_by_installed``, ``deprecated``, ``launcher``, ``container_image``,
    ``errors``, ``placeholders``, ``duplicates``, ``config_file``, ``is_server``.
    """
    ver = version_tuple(version)
    release, note = table_release(version)
    values = dict(parsed.values)
    invalid = _drop_invalid_numbers(values, release)
    flags: dict[str, Any] = dict(_STATIC_DEFAULTS)
    sources = {key: "default" for key in _STATIC_DEFAULTS}
    for dest, (value, flag) in _table_defaults(release).items():
        flags[dest], sources[dest] = value, f"default ({flag} of vLLM {release})"
    for key, value in _config_defaults(release).items():
        flags[key], sources[key] = value, f"default (config default of vLLM {release})"
    for key, value in values.items():
        flags[key], sources[key] = value, "argv"
    _fill_derived(flags, sources, values, ver)
    _fill_util(flags, sources, values, ver)
    _fill_batch(flags, sources, values, ver, (gpu_memory_gib, gpu_name, gpu_cc, gpu_vendor))
    _normalise(flags, sources, values)
    for key, raw in invalid.items():
        flags.setdefault(key, None)  # unset: the release's default when it has one
        sources[key] = f"{sources.get(key, 'default')}; argv value {str(raw)[:40]!r} ignored " \
                       "(not a usable number: treated as unset)"
    rejected = not_accepted(parsed, release) if ver is not None and ver >= _oldest() else []
    meta = {
        "set": sorted(values), "sources": sources,
        "source": {k: _category(v) for k, v in sources.items()},
        "release": release, "release_note": note, "unknown": list(parsed.unknown),
        "not_accepted": rejected,
        "removed": [_removed_item(r) for r in rejected if r["reason"] == "removed"],
        "rejected_by_installed": installed_rejections(parsed, version, installed),
        "deprecated": _deprecated(parsed, release), "launcher": parsed.launcher,
        "container_image": parsed.container_image, "errors": list(parsed.errors),
        "placeholders": list(parsed.placeholders), "duplicates": list(parsed.duplicates),
        "config_file": parsed.config_file, "is_server": parsed.is_server,
        "invalid": sorted(invalid),
    }
    meta["errors"] += [f"--{key.replace('_', '-')} {str(raw)[:40]!r}: not a usable number, "
                       "treated as unset" for key, raw in invalid.items()]
    return flags, meta


#: Largest magnitude a numeric flag may have before it is treated as invalid (int64).
_MAX_FLAG_NUMBER = 2**63


@per_kb
def _numeric_dests(release: str) -> frozenset[str]:
    """Option dests whose table type is a number (``int…`` or ``float``) in ``release``."""
    return frozenset(o["dest"] for o in table(release)["options"].values()
                     if str(o.get("type") or "").startswith(("int", "float")))


def _drop_invalid_numbers(values: dict[str, Any], release: str) -> dict[str, Any]:
    """Remove numeric options whose value is not a finite number in int64 range (``nan``,
    ``inf``, ``abc``, 10**400) from ``values``; returns them. One poisoned argv value must
    not break the geometry, the pages or the recommendation, so such an
    option counts as unset (the release's default applies) and the context says so."""
    numeric = _numeric_dests(release)
    invalid = {}
    for key, value in list(values.items()):
        if key not in numeric or value is None or value == "auto":
            continue
        usable = isinstance(value, int | float) and not isinstance(value, bool) \
            and math.isfinite(value) and abs(value) < _MAX_FLAG_NUMBER
        if not usable:
            invalid[key] = values.pop(key)
    return invalid


def _removed_item(item: dict[str, Any]) -> dict[str, Any]:
    """A ``flags_meta.removed`` entry (the shape rules and the recommender read); the
    replacement advice of flags_defaults.REMOVED_FLAGS when it has a sourced row."""
    advice = {"--" + key.replace("_", "-"): (replacement, source)
              for key, _, replacement, source in REMOVED_FLAGS}
    replacement, source = advice.get(item["flag"], (
        "see the release notes of vLLM " + item["removed_in"], None))
    tables = (f"vLLM release tables (audit/kb/data/vllm): accepted by {item['last_accepted']},"
              f" absent from {item['removed_in']}")
    return {"flag": item["flag"], "removed_in": item["removed_in"],
            "last_accepted": item["last_accepted"], "replacement": replacement,
            "source": f"{tables}; {source}" if source else tables}


def installed_rejections(parsed: ParsedArgv, running: str | None,
                         target: str | None) -> list[dict[str, Any]]:
    """Options the ``target`` (installed or planned) release refuses although the running
    one accepts them: the next restart on ``target`` fails with "unrecognized arguments".
    Each: {flag, release (target's table), reason, removed_in, last_accepted, dest}.
    [] when either version is unknown, older than the tables, or both map to one table."""
    run_ver, target_ver = version_tuple(running), version_tuple(target)
    if run_ver is None or target_ver is None or target_ver < _oldest() or run_ver < _oldest():
        return []
    run_release, _ = table_release(running)
    target_release, _ = table_release(target)
    if run_release == target_release:
        return []
    running_bad = {r["flag"] for r in not_accepted(parsed, run_release)}
    return [r for r in not_accepted(parsed, target_release) if r["flag"] not in running_bad]


def _deprecated(parsed: ParsedArgv, release: str) -> list[str]:
    options = table(release)["options"]
    return sorted({u["spelling"] for u in parsed.used if u["accepted"]
                   and options.get(u["flag"], {}).get("deprecated")})


def _fill_derived(flags: dict, sources: dict, values: dict, ver: Version | None) -> None:
    """Defaults that follow from other settings or the engine generation."""
    if ver is not None and ver < _oldest():
        v1 = ver >= _V1_DEFAULT
        era = "V1 default" if v1 else "V0 default"
        for key, value in (("enable_prefix_caching", v1),
                           ("enable_chunked_prefill", True if v1 else None)):
            if key not in values:
                flags[key], sources[key] = value, f"default ({era}, before vLLM 0.8.5)"
        if "swap_space" not in values:
            flags["swap_space"], sources["swap_space"] = 4.0, "default (4 GiB CPU swap)"
    for key in ("enable_prefix_caching", "enable_chunked_prefill"):
        if key not in flags:  # None in the table (0.8.5-0.11): resolved at start, on for V1
            flags[key] = True
            sources[key] = "derived (V1 engine turns it on when unset)"
    if "performance_mode" not in values and flags.get("performance_mode") is None:
        flags["performance_mode"], sources["performance_mode"] = "balanced", "default"
    if "api_server_count" not in values:
        flags["api_server_count"] = values.get("data_parallel_size") or 1
        sources["api_server_count"] = "derived (= data_parallel_size)"


def _fill_util(flags: dict, sources: dict, values: dict, ver: Version | None) -> None:
    if "gpu_memory_utilization" not in values:
        flags["gpu_memory_utilization"], sources["gpu_memory_utilization"] = \
            default_gpu_memory_utilization(ver)


def _fill_batch(flags: dict, sources: dict, values: dict, ver: Version | None,
                gpu: tuple) -> None:
    """max_num_seqs / max_num_batched_tokens defaults, then vLLM's post-adjustments
    (vllm-facts §4.3): throughput mode doubles defaulted values; without chunked prefill
    tokens >= max_model_len; max_num_seqs <= max_num_batched_tokens."""
    seqs, tokens, rule = batch_defaults(ver, *gpu)
    if flags.get("performance_mode") == "throughput":
        seqs = seqs * 2 if seqs else seqs
        tokens = tokens * 2 if tokens else tokens
        rule += "; doubled by --performance-mode throughput"
    if "max_num_seqs" not in values:
        flags["max_num_seqs"], sources["max_num_seqs"] = seqs, f"default ({rule})"
    if "max_num_batched_tokens" not in values:
        max_len = flags.get("max_model_len")
        if flags.get("enable_chunked_prefill") is False and isinstance(max_len, int):
            tokens = max(tokens or 0, max_len)
            rule += "; chunked prefill off -> >= max_model_len"
        flags["max_num_batched_tokens"] = tokens
        sources["max_num_batched_tokens"] = f"default ({rule})"
    if "max_num_seqs" not in values and isinstance(flags["max_num_batched_tokens"], int) \
            and isinstance(flags["max_num_seqs"], int):
        flags["max_num_seqs"] = min(flags["max_num_seqs"], flags["max_num_batched_tokens"])


def _normalise(flags: dict, sources: dict, values: dict) -> None:
    """Shape a few values the way rules read them."""
    names = flags.get("served_model_name")
    if isinstance(names, list):
        flags["served_model_name_all"] = names
        flags["served_model_name"] = names[0] if names else None
    if flags.get("served_model_name") is None and flags.get("model"):
        flags["served_model_name"] = flags["model"]
        sources["served_model_name"] = "default (= model)"
    if flags.get("max_model_len") == "auto":
        flags["max_model_len"] = None
        sources["max_model_len"] = "argv (auto: largest that fits)"
    if flags.get("limit_mm_per_prompt") is None:
        flags["limit_mm_per_prompt"] = {}
    for key in ("quantization", "kv_cache_dtype", "dtype", "attention_backend"):
        if isinstance(flags.get(key), str):
            flags[key] = flags[key].strip()


def removed_flags(values: dict[str, Any], version: Version | None) -> list[dict[str, Any]]:
    """Flags in ``values`` (dest -> value) that ``version`` no longer accepts, from the
    tables (each flag checked in its primary spelling). Unknown version -> []."""
    if version is None or version < _oldest():
        return []
    from audit.kb.flags import ParsedArgv as _Parsed
    from audit.kb.vllm_tables import union_index
    parsed = _Parsed()
    for spelling, (_, entry) in union_index().items():
        if entry.dest in values and not entry.negative and spelling == entry.flag:
            parsed.used.append({"spelling": spelling, "flag": entry.flag, "dest": entry.dest,
                                "accepted": True})
    release, _ = table_release(str(version))
    return [_removed_item(r) for r in not_accepted(parsed, release) if r["reason"] == "removed"]


def source_categories(sources: dict[str, str]) -> dict[str, str]:
    """``meta["sources"]`` sentences -> argv | default | derived per key."""
    return {key: _category(text) for key, text in sources.items()}


def derive_max_model_len(release: str, hf_config: dict[str, Any] | None) -> tuple[Any, str]:
    """What ``release`` makes of an unset ``--max-model-len`` for a model's config.json.

    Hook for the model catalogue (``hf_config`` = parsed config.json, ``text_config`` read
    for multimodal wrappers). vLLM takes the smallest of the table's ``possible_keys``
    present (``_get_and_verify_max_len``), else ``fallback_when_no_key`` (2048). Returns
    (tokens or None, source sentence); None when no config is known."""
    if not isinstance(hf_config, dict):
        return None, "unknown (no model config.json)"
    rules = table(release)["max_model_len"]
    config = hf_config.get("text_config") if isinstance(hf_config.get("text_config"),
                                                         dict) else hf_config
    found = {k: config[k] for k in rules.get("possible_keys", [])
             if isinstance(config.get(k), int) and not isinstance(config.get(k), bool)}
    if not found:
        fallback = rules.get("fallback_when_no_key")
        return fallback, f"derived (no length key in config.json: vLLM {release} uses {fallback})"
    key = min(found, key=found.get)
    return found[key], f"derived (config.json {key}, smallest length key; vLLM {release})"
