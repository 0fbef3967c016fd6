"""Fitting a report under the dashboard's size limit by dropping metric families.

The limit is :data:`fleet_agent.schema.MAX_REPORT_BYTES` (4 MiB after decompression,
``docs/wire-contract.md``). The rules only read ``vllm:*`` families
(``docs/vllm-facts.md`` section 1), so families are dropped in this order
until the report fits: ``python_*``/``process_*``/``http_*`` (collector and
instrumentator families), every other non-``vllm:`` family, the ``vllm:*_created``
timestamp gauges, and finally (never expected) a server's whole metrics text,
largest first. Each drop is recorded in that server's ``errors``.

:func:`conform` first cuts the report to the per-field limits of the schema, so one
oversized field or server never costs the whole report.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Callable
from typing import Any

from fleet_agent import schema
from fleet_agent.redact import map_json
from fleet_agent.schema import MAX_REPORT_BYTES

log = logging.getLogger(__name__)

_NAME = re.compile(r"^(?:#\s*(?:HELP|TYPE|UNIT)\s+)?([A-Za-z_:][A-Za-z0-9_:]*)")


def metric_name(line: str) -> str | None:
    """Family name of an exposition line (``# HELP x``, ``# TYPE x`` or a sample), else None."""
    match = _NAME.match(line)
    return match.group(1) if match else None


def _is_runtime(name: str) -> bool:
    return name.startswith(("python_", "process_", "http_"))


def _not_vllm(name: str) -> bool:
    return not name.startswith("vllm:")


def _vllm_created(name: str) -> bool:
    return name.startswith("vllm:") and name.endswith("_created")


#: Drop stages in order: (description, predicate on the family name).
STAGES: list[tuple[str, Callable[[str], bool]]] = [
    ("python_*/process_*/http_* families", _is_runtime),
    ("non-vllm families", _not_vllm),
    ("vllm:*_created families", _vllm_created),
]


def drop_families(text: str, predicate: Callable[[str], bool]) -> tuple[str, int]:
    """Remove every line whose family matches ``predicate``; returns (text, lines removed)."""
    kept: list[str] = []
    removed = 0
    for line in text.splitlines(keepends=True):
        name = metric_name(line)
        if name is not None and predicate(name):
            removed += 1
        else:
            kept.append(line)
    return "".join(kept), removed


def report_size(data: dict[str, Any]) -> int:
    """Size in bytes of the report as the agent serialises it (compact UTF-8 JSON)."""
    return len(json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))


def fit(data: dict[str, Any], limit: int = MAX_REPORT_BYTES) -> dict[str, Any]:
    """Trim ``data`` (a report as JSON-ready dict) in place until it fits ``limit`` bytes."""
    if report_size(data) <= limit:
        return data
    servers = [s for s in data.get("servers", []) if s.get("metrics")]
    for description, predicate in STAGES:
        for server in servers:
            text, removed = drop_families(server["metrics"]["text"], predicate)
            if removed:
                server["metrics"]["text"] = text
                server.setdefault("errors", []).append(
                    f"metrics trimmed to fit the {limit} byte report limit: "
                    f"dropped {removed} lines of {description}")
        if report_size(data) <= limit:
            return data
    for server in sorted(servers, key=lambda s: len(s["metrics"]["text"]), reverse=True):
        server["metrics"] = None
        server.setdefault("errors", []).append(
            f"metrics dropped: the report exceeded the {limit} byte limit")
        if report_size(data) <= limit:
            return data
    # Still too large without any metrics: drop the largest servers, never the whole report.
    for server in sorted(data.get("servers", []), key=report_size, reverse=True):
        data["servers"].remove(server)
        log.warning("server pid %s not reported: the report exceeded %d bytes",
                    server.get("pid"), limit)
        if report_size(data) <= limit:
            break
    _drop_model_files(data, limit)
    return data


# --- conforming to the dashboard's limits ------------------------

#: Server string fields and their column widths (fleet_agent.schema.ServerInfo).
_SERVER_TEXT = {"container_image": 500, "base_url": 500, "vllm_version": 128,
                "installed_vllm_version": 128, "cwd": schema.MAX_PATH_CHARS,
                "model_revision": 255}
_HOST_TEXT = {"os": 255, "kernel": 255, "nvidia_driver_version": 64, "cuda_driver_version": 64}


def clean_text(text: str) -> str:
    """``text`` without NUL characters and with lone surrogates replaced (``?``), so that it
    is valid UTF-8 and storable in PostgreSQL."""
    text = text.replace("\x00", "")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", errors="replace").decode("utf-8")
    return text


def _finite(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _clean_all(data: Any) -> Any:
    """``data`` with every string cleaned (:func:`clean_text`), NaN/Infinity as null and
    anything nested past :data:`fleet_agent.schema.MAX_JSON_DEPTH` as null (the dashboard
    refuses deeper documents); iterative, never a RecursionError."""
    return map_json(data, clean_text, other=_finite, max_depth=schema.MAX_JSON_DEPTH)


def _cut(value: Any, limit: int) -> Any:
    return value[:limit] if isinstance(value, str) else value


def _note(server: dict[str, Any], text: str) -> None:
    server.setdefault("errors", []).append(text[:schema.MAX_ERROR_CHARS])


def _server_too_big(server: dict[str, Any]) -> str | None:
    """Why ``server`` cannot be sent at all (argv/env past the caps), else None."""
    argv, env = server.get("argv") or [], server.get("env") or {}
    if len(argv) > schema.MAX_ARGV or any(len(w) > schema.MAX_ARG_CHARS for w in argv):
        return f"argv of {len(argv)} words exceeds the limits"
    if len(env) > schema.MAX_ENV or any(
            len(k) > schema.MAX_ENV_NAME_CHARS or len(v) > schema.MAX_ENV_VALUE_CHARS
            for k, v in env.items()):
        return f"environment of {len(env)} variables exceeds the limits"
    return None


def _conform_metrics(server: dict[str, Any]) -> None:
    metrics = server.get("metrics")
    if not metrics or not isinstance(metrics.get("text"), str):
        return
    text = metrics["text"]
    if len(text) > schema.MAX_METRICS_CHARS:
        server["metrics"] = None
        _note(server, f"metrics dropped: {len(text)} characters, over "
                      f"{schema.MAX_METRICS_CHARS}")
        return
    if schema.max_line_length(text) > schema.MAX_METRICS_LINE_CHARS:
        lines = text.splitlines(keepends=True)
        kept = [line for line in lines if len(line.rstrip("\n")) <= schema.MAX_METRICS_LINE_CHARS]
        metrics["text"] = "".join(kept)
        _note(server, f"metrics: {len(lines) - len(kept)} lines over "
                      f"{schema.MAX_METRICS_LINE_CHARS} characters dropped")


def _conform_server(server: dict[str, Any]) -> None:
    for name, limit in _SERVER_TEXT.items():
        server[name] = _cut(server.get(name), limit)
    models = server.get("models") or []
    if len(models) > schema.MAX_MODELS:
        server["models"] = models[:schema.MAX_MODELS]
        _note(server, f"{len(models)} models, the first {schema.MAX_MODELS} kept")
    template = server.get("chat_template")
    if isinstance(template, dict):
        template["source"] = _cut(template.get("source"), 1000)
    _conform_metrics(server)
    errors = [_cut(e, schema.MAX_ERROR_CHARS) for e in server.get("errors") or []]
    if len(errors) > schema.MAX_ERRORS:
        errors = errors[:schema.MAX_ERRORS - 1] + [
            f"{len(errors) - schema.MAX_ERRORS + 1} more errors not reported"]
    server["errors"] = errors


def conform(data: dict[str, Any]) -> dict[str, Any]:
    """Cut a report (JSON-ready dict) to the dashboard's limits (:mod:`fleet_agent.schema`).

    Strings lose NUL characters and lone surrogates and are cut to their column widths;
    models, errors, labels, GPUs and servers are capped; a server whose argv or environment
    exceeds the caps is dropped (logged), never the whole report. Returns the new dict.
    """
    data = _clean_all(data)
    host = data.get("host") or {}
    for name, limit in _HOST_TEXT.items():
        host[name] = _cut(host.get(name), limit)
    labels = host.get("labels") or {}
    host["labels"] = {k[:schema.MAX_LABEL_KEY_CHARS]: str(v)[:schema.MAX_LABEL_VALUE_CHARS]
                      for k, v in list(labels.items())[:schema.MAX_LABELS]}
    data["gpus"] = (data.get("gpus") or [])[:schema.MAX_GPUS]
    data["gpu_error"] = _cut(data.get("gpu_error"), schema.MAX_ERROR_CHARS)
    data["gpu_processes"] = (data.get("gpu_processes") or [])[:schema.MAX_GPU_PROCESSES]
    servers = []
    for server in data.get("servers") or []:
        reason = _server_too_big(server)
        if reason:
            log.warning("server pid %s not reported: %s", server.get("pid"), reason)
            continue
        _conform_server(server)
        servers.append(server)
    if len(servers) > schema.MAX_SERVERS:
        log.warning("%d servers found, the first %d reported", len(servers), schema.MAX_SERVERS)
    data["servers"] = servers[:schema.MAX_SERVERS]
    return data


def _drop_model_files(data: dict[str, Any], limit: int) -> None:
    """Last resort: drop the model configs (at most 256 KiB each), largest first."""
    holders = [s for s in data.get("servers", []) if s.get("model_files")]
    for server in sorted(holders, key=lambda s: len(json.dumps(s["model_files"])),
                         reverse=True):
        if report_size(data) <= limit:
            return
        server["model_files"] = None
        server.setdefault("errors", []).append(
            f"model_files dropped: the report exceeded the {limit} byte limit")
