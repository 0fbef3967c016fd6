"""Build the dict every rule sees for one vLLM server of one agent report.

Contract: docs/knowledge-base.md, section "Context reference". Pure functions, no
Django: ``build_context(server, report, history)`` and ``build_contexts(report, history)``.
Every documented key is always present (None / [] / {} when unknown) because CEL errors on
missing keys. ``history`` is the previous reports of the same host, oldest first.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from functools import lru_cache
from typing import Any

from audit.kb import metrics as metrics_mod
from audit.kb.backends import attention_block
from audit.kb.catalogue import decide, parser_block
from audit.kb.effective import derive_max_model_len, effective_flags, source_categories
from audit.kb.evidence_of_serving import serving_evidence
from audit.kb.fixes import fixes_block, server_features
from audit.kb.flags import ParsedArgv, parse_argv
from audit.kb.geometry import INT4_QUANTS, detect_quantization, geometry_context
from audit.kb.gpus import gpu_context
from audit.kb.invariants import with_invariants
from audit.kb.modelblock import files_block, memory_block, model_arch, quant_from_config
from audit.kb.modelcfg import text_config
from audit.kb.paths import kb_generation
from audit.kb.perf import perf_block
from audit.kb.probes import probes_block
from audit.kb.servermodel import server_model
from audit.kb.support import support_block
from audit.kb.template_parsers import hybrid_thinking, parser_check
from audit.kb.templates import template_context
from audit.kb.versions import parse_version, version_tuple
from audit.kb.vllm_tables import table_release

_HF_REPO_RE = re.compile(r"^[\w.\-]+/[\w.\-]+$")


# --------------------------------------------------------------------------- helpers

def _int(value: Any, default: int | None = 1) -> int | None:
    """A positive int flag value, else ``default`` (bad argv values stay strings in flags)."""
    ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
    return value if ok else default


def _parse_time(text: Any) -> datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


@lru_cache(maxsize=64)
def _snapshot(text: str) -> metrics_mod.MetricSnapshot:
    """Parsed /metrics, cached: history windows re-read the previous scrape."""
    return metrics_mod.parse(text)


def _metrics_text(server: dict[str, Any]) -> str | None:
    block = server.get("metrics") or {}
    text = block.get("text") if isinstance(block, dict) else None
    return text if isinstance(text, str) and text.strip() else None


def server_key(server: dict[str, Any]) -> str:
    """Identity of a server across reports: base_url, else the pid."""
    return str(server.get("base_url") or f"pid:{server.get('pid')}")


def _same_server(history: list[dict] | None, key: str) -> list[tuple[dict, dict]]:
    """(report, server entry) pairs of this server in history, oldest first."""
    found = []
    for report in history or []:
        for entry in report.get("servers") or []:
            if server_key(entry) == key:
                found.append((report, entry))
                break
    return found


def _restarted(prev: dict, cur: dict) -> bool:
    """Process identity changed: another pid or another start time."""
    pid_changed = prev.get("pid") is not None and cur.get("pid") is not None \
        and prev.get("pid") != cur.get("pid")
    start_changed = bool(prev.get("started_at")) and bool(cur.get("started_at")) \
        and prev.get("started_at") != cur.get("started_at")
    return pid_changed or start_changed


def _resolved_version(server: dict, image: str | None) -> dict[str, Any]:
    """Running version from GET /version, else from the container image tag."""
    info = parse_version(server.get("vllm_version"))
    if info.version is None and image:
        from_image = parse_version(image)
        if from_image.version is not None or info.raw is None:
            note = f"/version unavailable; from container image: {from_image.note}"
            return {**from_image.as_dict(), "note": note}
    return info.as_dict()


def _template_sha(server: dict) -> str | None:
    return (server.get("chat_template") or {}).get("sha256")


# --------------------------------------------------------------------------- blocks

def vllm_block(server: dict, image: str | None, history: list[dict] | None) -> dict[str, Any]:
    """``vllm`` block: running/installed/previous version and restart history."""
    return _vllm_history(_vllm_running(server, image), server, history)


def _vllm_running(server: dict, image: str | None) -> dict[str, Any]:
    """The ``vllm`` block as if the server had no history (what reads the report alone)."""
    running = _resolved_version(server, image)
    installed = parse_version(server.get("installed_vllm_version")).version
    pending = bool(installed and running["version"]
                   and version_tuple(installed) != version_tuple(running["version"]))
    release, release_note = table_release(running["version"])
    installed_release = table_release(installed)[0] if installed else None
    return {
        "table_release": release, "table_note": release_note,
        "installed_table_release": installed_release,
        "version": running["version"], "version_raw": server.get("vllm_version"),
        "version_note": running["note"], "is_prerelease": running["is_prerelease"],
        "is_nightly": running["is_nightly"], "installed": installed,
        "installed_raw": server.get("installed_vllm_version"), "pending_upgrade": pending,
        "previous": None, "version_changed": False, "restarted": False,
        "restarted_without_change": False, "restarts": 0, "newer_than_vetted": False,
    }


def _vllm_history(running: dict[str, Any], server: dict,
                  history: list[dict] | None) -> dict[str, Any]:
    """``running`` (:func:`_vllm_running`, not modified) with the previous version and the
    restarts read from ``history``."""
    past = _same_server(history, server_key(server))
    previous = None
    if past:
        prev_entry = past[-1][1]
        prev_image = prev_entry.get("container_image")
        previous = _resolved_version(prev_entry, prev_image)["version"]
    chain = [entry for _, entry in past] + [server]
    restarts = sum(_restarted(a, b) for a, b in zip(chain, chain[1:], strict=False))
    restarted = bool(past) and _restarted(past[-1][1], server)
    unchanged = bool(past) and previous == running["version"] \
        and list(past[-1][1].get("argv") or []) == list(server.get("argv") or []) \
        and _template_sha(past[-1][1]) == _template_sha(server)
    return {**running, "previous": previous,
            "version_changed": previous is not None and previous != running["version"],
            "restarted": restarted, "restarted_without_change": restarted and unchanged,
            "restarts": restarts}


def _model_hints(parsed: ParsedArgv, flags: dict[str, Any], server: dict) -> list[str]:
    """Strings that may name the model: id, the host path mounted on it (docker ``-v`` in
    argv, or the optional ``container_mounts`` {container path: host path} server field),
    served names."""
    model = flags.get("model")
    hints = [model] if model else []
    mounts = {**(server.get("container_mounts") or {}), **parsed.mounts}
    if isinstance(model, str):
        for container, host in mounts.items():
            if model.rstrip("/") == container or model.startswith(container + "/"):
                hints.append(host + model[len(container):])
    hints.extend(flags.get("served_model_name_all") or [flags.get("served_model_name")])
    return [h for h in hints if isinstance(h, str) and h]


def speculative_block(config: Any) -> dict[str, Any]:
    """``model.speculative``: method (normalised), draft model, k, parallel drafting.

    Method inference when ``method`` is absent (vllm-facts §4.2): a ``*-assistant`` draft
    (gemma4_assistant) -> "mtp"; names containing eagle3/eagle/dflash/dspark -> that method;
    any other draft model -> "draft_model". ``enabled`` is True whenever a config was given,
    even one whose value is unknown (``<...>`` in argv)."""
    out = {"enabled": config is not None, "method": None, "model": None,
           "num_speculative_tokens": None, "parallel_drafting": False,
           "draft_tensor_parallel_size": None, "raw_method": None}
    if not isinstance(config, dict):
        return out
    method = str(config.get("method") or "").lower() or None
    model = config.get("model")
    out.update(model=model, raw_method=method,
               num_speculative_tokens=config.get("num_speculative_tokens"),
               parallel_drafting=bool(config.get("parallel_drafting", False)),
               draft_tensor_parallel_size=config.get("draft_tensor_parallel_size"))
    out["method"] = _normalise_method(method, str(model or "").lower())
    return out


def _normalise_method(method: str | None, model: str) -> str | None:
    if method:
        if method == "mtp" or method.endswith("_mtp"):
            return "mtp"
        return {"ngram_gpu": "ngram"}.get(method, method)
    for marker in ("eagle3", "dflash", "dspark", "eagle"):
        if marker in model:
            return marker
    if "assistant" in model or "mtp" in model:
        return "mtp"
    return "draft_model" if model else None


def _multimodal_allowed(flags: dict[str, Any]) -> bool:
    """False with --language-model-only or every --limit-mm-per-prompt entry at 0."""
    if flags.get("language_model_only"):
        return False
    limits = flags.get("limit_mm_per_prompt") or {}
    if not isinstance(limits, dict) or not limits or "_raw" in limits:
        return True
    counts = [v.get("count", 1) if isinstance(v, dict) else v for v in limits.values()]
    return any(not isinstance(c, (int, float)) or c > 0 for c in counts)


def model_block(parsed: ParsedArgv, flags: dict[str, Any],
                server: dict) -> tuple[dict[str, Any], Any]:
    """``model`` block (without geometry) and the geometry row for :func:`geometry_context`.

    The family is decided once (:func:`audit.kb.catalogue.decide`: the node's config.json
    first, then the name) and ``family_source`` says how; ``arch`` is the config geometry
    (:mod:`audit.kb.modelcfg`) and ``files`` what the node read from the model directory."""
    hints = _model_hints(parsed, flags, server)
    files = files_block(server.get("model_files"))
    decision = decide(files["config"], hints)
    arch = model_arch(decision)
    row = arch.pop("_table_row")
    quant, how = quant_from_config(flags.get("quantization"), files["config"])
    if quant is None:
        quant, how = detect_quantization(flags.get("quantization"), flags.get("dtype"), *hints)
    model_id = flags.get("model")
    native = (decision["table_row"] or {}).get("native_dtype", "bf16")
    if quant is None and isinstance(model_id, str) and (_HF_REPO_RE.match(model_id) or row):
        quant, how = native, f"no quantization marker: native {native} checkpoint assumed"
    family = decision["family"] or ("other" if model_id else None)
    capable = bool((row and row.get("multimodal")) or arch["multimodal"])
    block = {
        "id": model_id, "served_model_name": flags.get("served_model_name"),
        "hints": hints, "family": family, "family_source": decision["family_source"],
        "family_decided": decision["family"] is not None,
        "table_key": (decision["table_row"] or {}).get("key"),
        "is_gemma4": bool(family and family.startswith("gemma4") and family != "gemma4-assistant"),
        "is_moe": bool((row and row.get("moe")) or arch["is_moe"]), "quantization": quant,
        "quantization_source": how, "is_int4": quant in INT4_QUANTS,
        "multimodal_capable": capable,
        "multimodal": capable and _multimodal_allowed(flags),
        "speculative": speculative_block(flags.get("speculative_config")),
        "arch": arch, "files": {k: v for k, v in files.items() if k != "config"},
        "parsers": parser_block(family, decision["family"] is not None,
                                flags.get("tool_call_parser"), flags.get("reasoning_parser")),
    }
    return block, row


# Environment variables that change an engine setting argv leaves unset (vLLM reads them
# at start): VLLM_ATTENTION_BACKEND selects the attention backend (case 008, vllm#29531).
_ENV_FLAGS = {"VLLM_ATTENTION_BACKEND": "attention_backend"}


def _apply_env(flags: dict, meta: dict, env: dict) -> None:
    """Fill flags from known env overrides when argv did not set them; record which."""
    meta["env_overrides"] = []
    for var, key in _ENV_FLAGS.items():
        value = env.get(var) if isinstance(env, dict) else None
        if value and key not in meta["set"]:
            flags[key] = str(value).strip()
            meta["sources"][key] = f"env {var}"
            meta["env_overrides"].append(var)


def _fill_max_model_len(flags: dict, meta: dict, server: dict, row: Any,
                        derived: int | None = None, derived_source: str | None = None) -> None:
    """Unset --max-model-len: /v1/models' effective value, else what vLLM derives from the
    model's config (``derived``, :func:`audit.kb.memory.derived_max_model_len`, which applies
    rope scaling), else the release's rule on a bare ``server["model_config"]``
    (:func:`audit.kb.effective.derive_max_model_len`), else the models.yaml max positions."""
    if flags.get("max_model_len") is not None or "max_model_len" in meta["set"]:
        return
    cards = server.get("models") or []
    served = next((c.get("max_model_len") for c in cards if isinstance(c, dict)
                   and isinstance(c.get("max_model_len"), int)), None)
    if served:
        flags["max_model_len"] = served
        meta["sources"]["max_model_len"] = "GET /v1/models (effective)"
    elif derived:
        flags["max_model_len"] = derived
        meta["sources"]["max_model_len"] = f"default (derived from {derived_source})"
    elif isinstance(server.get("model_config"), dict):
        flags["max_model_len"], meta["sources"]["max_model_len"] = derive_max_model_len(
            meta["release"], server["model_config"])
    elif row and row.get("max_position_embeddings"):
        flags["max_model_len"] = row["max_position_embeddings"]
        meta["sources"]["max_model_len"] = "default (model max_position_embeddings, models.yaml)"


def _scrape(server: dict[str, Any]) -> metrics_mod.MetricSnapshot | None:
    """The server entry's scrape: compact form (no parse) or text (parsed once, cached)."""
    block = server.get("metrics")
    if isinstance(block, dict) and isinstance(block.get("compact"), dict):
        return metrics_mod.from_compact(block["compact"])
    text = _metrics_text(server)
    return _snapshot(text) if text else None


def metrics_block(server: dict, report: dict, history: list[dict] | None,
                  restarted: bool) -> dict[str, Any]:
    """``metrics`` block: window against the previous scrape of the same process (lifetime
    after a restart or with no history), plus ``lifetime``, ``available``, ``era``."""
    scraped = _scrape(server)
    cur = scraped if scraped is not None else metrics_mod.parse("")
    prev, elapsed = None, None
    past = _same_server(history, server_key(server))
    if past and not restarted and scraped is not None:
        prev_report, prev_entry = past[-1]
        prev = _scrape(prev_entry)
        if prev is not None:
            elapsed = _elapsed(prev_report, prev_entry, report, server)
    current = metrics_mod.window(prev, cur, elapsed)
    lifetime = current if prev is None else metrics_mod.window(None, cur, None)
    # The gauges at the window's start: an invariant holds over the window only when it
    # holds at both ends (a single scrape can catch a queue mid-admission).
    start = None if prev is None or current["window_kind"] != "delta" else {
        "kv_cache_usage": prev.gauges.get("kv_cache_usage"),
        "requests_running": prev.gauges.get("requests_running"),
        "requests_waiting": prev.gauges.get("requests_waiting"),
        "requests_waiting_capacity": (prev.by_label.get("requests_waiting") or {}).get(
            "capacity")}
    return {**current, "start": start,
            "available": scraped is not None and bool(cur.present), "lifetime": lifetime,
            "era": cur.era, "model_names": list(cur.model_names),
            "cache_config": dict(cur.cache_config)}


def _elapsed(prev_report: dict, prev_entry: dict, report: dict, server: dict) -> float | None:
    """Seconds between two scrapes (metrics.scraped_at, else report collected_at)."""
    pairs = (((prev_entry.get("metrics") or {}).get("scraped_at"),
              (server.get("metrics") or {}).get("scraped_at")),
             (prev_report.get("collected_at"), report.get("collected_at")))
    for before, after in pairs:
        start, end = _parse_time(before), _parse_time(after)
        if start and end and end > start:
            return (end - start).total_seconds()
    return None


def host_block(report: dict) -> dict[str, Any]:
    """``host`` block from the report's host section."""
    host = report.get("host") or {}
    return {
        "hostname": host.get("hostname"), "machine_id": host.get("machine_id"),
        "labels": host.get("labels") or report.get("labels") or {},
        "gpu_count": len(report.get("gpus") or []),
        "driver": host.get("nvidia_driver_version"), "cuda": host.get("cuda_driver_version"),
        "gpu_error": report.get("gpu_error"),
    }


# --------------------------------------------------------------------------- entry points

def build_context(server: dict[str, Any], report: dict[str, Any],
                  history: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Context dict for one server (see module docstring and the interface doc).

    Args: ``server`` — one element of ``report["servers"]``; ``report`` — the whole contract
    report; ``history`` — previous reports of the same host, oldest first.
    Returns a JSON-able dict with keys ``vllm``, ``flags``, ``flags_meta``, ``model``,
    ``gpu``, ``memory``, ``server_model`` (audit.kb.servermodel: the engine's capacity figures
    first), ``template``, ``metrics``, ``geometry``, ``host``, ``support``, ``fixes``,
    ``probes``, ``server``, ``perf``. Never raises on malformed argv or metrics; problems are
    listed in ``flags_meta.errors`` /
    ``metrics.errors``.
    """
    return finish_context(config_part(server, report), server, report, history)


def config_part(server: dict[str, Any], report: dict[str, Any]) -> dict[str, Any]:
    """What :func:`build_context` reads from ``server`` and ``report`` without the history:
    every block but the history's (``vllm`` restarts and previous version, ``metrics``,
    ``server_model``, ``perf``). Shared, never modified, by every :func:`finish_context` of
    the same server entry and report (one report evaluated against two earlier ones)."""
    argv = server.get("argv") or []
    parsed = parse_argv(argv)
    image = server.get("container_image") or parsed.container_image
    vllm = _vllm_running(server, image)
    if vllm["table_release"] != parsed.release:  # read again as the running release would
        parsed = parse_argv(argv, vllm["table_release"])
    tp = _int(parsed.values.get("tensor_parallel_size"))
    pp = _int(parsed.values.get("pipeline_parallel_size"))
    gpu = gpu_context(report.get("gpus") or [], server.get("gpu_uuids"), tp * pp)
    flags, meta = effective_flags(parsed, vllm["version"], gpu["memory_gib"], gpu["name"],
                                  gpu_cc=gpu.get("compute_capability"),
                                  gpu_vendor=gpu.get("vendor"),
                                  installed=vllm["installed"] if vllm["pending_upgrade"]
                                  else None)
    meta["container_image"] = image
    meta["mounts"] = dict(parsed.mounts)
    _apply_env(flags, meta, server.get("env") or {})
    model, row = model_block(parsed, flags, server)
    _fill_max_model_len(flags, meta, server, row, model["arch"]["derived_max_model_len"],
                        model["arch"]["source"])
    meta["source"] = source_categories(meta["sources"])
    model["geometry"] = geometry = geometry_context(
        row, quant=model["quantization"], tp=tp, pp=pp,
        kv_cache_dtype=flags.get("kv_cache_dtype"),
        max_model_len=_int(flags.get("max_model_len"), None),
        max_num_batched_tokens=_int(flags.get("max_num_batched_tokens"), None),
        block_size=_int(flags.get("block_size"), None), memory_gib=gpu["min_memory_gib"],
        util=flags.get("gpu_memory_utilization")
        if isinstance(flags.get("gpu_memory_utilization"), float) else None,
        spec_model=model["speculative"]["model"])
    model["attention"] = attention_block(
        flags.get("attention_backend"), model["arch"], gpu.get("cc"),
        flags.get("kv_cache_dtype"), vllm["version"])
    cache = _engine_cache(server)
    memory = memory_block(model, flags, tp=tp, pp=pp, gpu=gpu, engine_cache=cache, row=row)
    support = support_block(
        vllm["table_release"], arch=model["arch"], flags=flags, gpu=gpu,
        quantization=flags.get("quantization") or model["arch"].get("quant_method"),
        spec_method=model["speculative"]["raw_method"], hidden_act=_hidden_act(server),
        parser_plugin="tool_parser_plugin" in meta["set"], version=vllm["version"])
    release = vllm["table_release"]
    parsers = parser_check(server.get("chat_template"), flags.get("tool_call_parser"),
                           flags.get("reasoning_parser"), model["family"])
    model["hybrid_thinking"], model["hybrid_thinking_by"] = hybrid_thinking(
        parsers, model["arch"].get("model_type"), model.get("id"))
    fixes = fixes_block(release, server_features(
        release=release, arch=model["arch"], flags=flags, gpu=gpu,
        quantization=flags.get("quantization") or model["arch"].get("quant_method"),
        spec_method=model["speculative"]["raw_method"]) if release else None)
    return {
        "vllm": vllm, "flags": flags, "flags_meta": meta, "model": model, "gpu": gpu,
        "memory": memory, "cache": cache,
        "template": {**template_context(server.get("chat_template"), server.get("errors")),
                     "parsers": parsers},
        "geometry": geometry, "host": host_block(report), "support": support,
        "fixes": fixes,
        "probes": probes_block(server),  # last live-probe results
        "server": {"pid": server.get("pid"), "base_url": server.get("base_url"),
                   "env": dict(server.get("env") or {}),
                   "started_at": server.get("started_at"), "errors": server.get("errors") or [],
                   "key": server_key(server)},
    }


#: What :func:`config_part` reads of each report GPU (:func:`audit.kb.gpus.gpu_context`:
#: ``server_gpus`` and ``describe``); the live readings (power, temperature, memory used,
#: utilisation) are not read, so they are not part of :func:`config_key`.
_GPU_FIELDS = ("uuid", "name", "memory_total_bytes", "compute_capability", "gfx_arch")


def config_key(server: dict[str, Any], report: dict[str, Any]) -> str:
    """A string equal for two ``(server, report)`` pairs :func:`config_part` reads alike, with
    the same knowledge-base data: the server entry without its scrape (but with the engine's
    cache config read from the scrape text), the GPUs' fields in :data:`_GPU_FIELDS`, what
    :func:`host_block` reads, and :func:`audit.kb.paths.kb_generation`. A change to
    :func:`config_part` that reads more of the report must add it here."""
    gpus = [[g.get(f) for f in _GPU_FIELDS] if isinstance(g, dict) else g
            for g in report.get("gpus") or []]
    material = [{k: v for k, v in server.items() if k != "metrics"}, _engine_cache(server),
                gpus, report.get("host"), report.get("labels"), report.get("gpu_error"),
                kb_generation()]
    return json.dumps(material, sort_keys=True, default=repr)


def vllm_history(part: dict[str, Any], server: dict[str, Any],
                 history: list[dict[str, Any]] | None) -> dict[str, Any]:
    """The ``vllm`` block :func:`finish_context` gives for ``part`` and ``history``."""
    return _vllm_history(part["vllm"], server, history)


def finish_context(part: dict[str, Any], server: dict[str, Any], report: dict[str, Any],
                   history: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The context of :func:`build_context` from its :func:`config_part` (same ``server``
    and ``report``; ``part`` is not modified) and ``history``."""
    vllm, flags, model = vllm_history(part, server, history), part["flags"], part["model"]
    memory, gpu, meta = part["memory"], part["gpu"], part["flags_meta"]
    metrics = with_invariants(metrics_block(server, report, history, vllm["restarted"]),
                              flags, model, memory, gpu, meta["release"])
    ctx = {
        "vllm": vllm, "flags": flags, "flags_meta": meta, "model": model, "gpu": gpu,
        "memory": memory,
        "server_model": server_model(flags=flags, sources=meta["sources"], model=model,
                                     geometry=part["geometry"], memory=memory, metrics=metrics,
                                     cache=part["cache"], cards=server.get("models")),
        "template": part["template"], "metrics": metrics,
        **{key: part[key] for key in ("geometry", "host", "support", "fixes", "probes")},
    }
    # Serving is read from the scrape, so it is set here, not in the cached config part.
    evidence = serving_evidence(server, metrics, part["probes"])
    ctx["server"] = {**part["server"], "serving": bool(evidence), "serving_evidence": evidence}
    ctx["perf"] = perf_block(ctx)  # the running command against its predicted latency
    return ctx


def _hidden_act(server: dict) -> str | None:
    """config.json's ``hidden_act`` (the decoder's, under ``text_config`` when nested)."""
    files = server.get("model_files")
    config = files.get("config") if isinstance(files, dict) else None
    if not isinstance(config, dict):
        return None
    value = text_config(config).get("hidden_act")
    return value if isinstance(value, str) else None


def _engine_cache(server: dict) -> dict[str, Any]:
    text = _metrics_text(server)
    return dict(_snapshot(text).cache_config) if text else {}


def build_contexts(report: dict[str, Any],
                   history: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """One context per server of ``report`` (same order as ``report["servers"]``)."""
    return [build_context(server, report, history) for server in report.get("servers") or []]
