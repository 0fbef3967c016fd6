"""Fitting a report under the dashboard's size limit by dropping metric families.

The limit is :data:`fleet_agent.schema.MAX_REPORT_BYTES` (4 MiB after decompression,
``docs/wire-contract.md``). The rules only read ``vllm:*`` families
(``docs/vllm-facts.md`` section 1), so families are dropped in this order
until the report fits: ``python_*``/``process_*``/``http_*`` (collector and
instrumentator families), every other non-``vllm:`` family, the ``vllm:*_created``
timestamp gauges, and finally (never expected) a server's whole metrics text,
largest first. Each drop is recorded in that server's ``errors``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from fleet_agent.schema import MAX_REPORT_BYTES

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
            break
    return data
