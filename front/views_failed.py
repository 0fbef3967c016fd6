"""The host page's failed-start block: when and how often the slot failed to
start, its last error lines, the rules that explain them with their fix, and the recommended
command for the vLLM release actually installed (from :mod:`advice.recommend`)."""

from __future__ import annotations

import logging
from typing import Any

from audit.crashloop import (
    CRASH_LOOP_RULE_ID,
    crash_loop_settings,
    incident_remedy,
    restarts_in_window,
)
from audit.models import Finding
from fleet.models import Report, Server

log = logging.getLogger(__name__)

#: Error lines shown (the newest); the full bounded list is in the finding's report.
LINES_SHOWN = 12


def failed_start_block(server: Server, report: Report | None,
                       findings: list[Finding]) -> dict[str, Any] | None:
    """``{"entry", "first_seen", "last_seen", "restarts", "window_minutes", "lines",
    "causes": [Finding], "loop": Finding | None, "installed", "remedy", "command",
    "explanation", "deferred_to": [rule id]}`` or None when the slot has no current failed
    start (``remedy``: audit.remedy's dict). ``explanation`` is the structured answer the
    findings carry (:mod:`audit.kb.failed_start_explain`: setting, value, change, failing
    and fix commands), the same one the finding and the crash-loop alert state."""
    state = server.failed_start
    if not state:
        return None
    entry = state.get("entry") or {}
    threshold, window_s = crash_loop_settings()
    last_seen = state.get("last_seen")
    ours = [f for f in findings if (f.evidence or {}).get("failed_start")]
    fix = incident_remedy(server, ours)
    return {
        "entry": entry, "first_seen": state.get("first_seen"), "last_seen": last_seen,
        "restarts": _restarts(state, last_seen, window_s), "window_minutes": window_s // 60,
        "threshold": threshold, "lines": (entry.get("lines") or [])[-LINES_SHOWN:],
        "causes": [f for f in ours if f.rule_id != CRASH_LOOP_RULE_ID],
        "loop": next((f for f in ours if f.rule_id == CRASH_LOOP_RULE_ID), None),
        "installed": server.installed_vllm_version or server.vllm_version or None,
        "remedy": fix,
        # Rolling back restarts the command that ran (the remedy says so); otherwise the
        # recommender's command for the fixed (or installed) release.
        "command": None if fix["kind"] == "pin_back" else installed_command(
            server, entry, report, fix["release"] or past_fix(server,
                                                              [f.rule_id for f in ours])),
        "explanation": next(((f.evidence or {}).get("explanation") for f in ours
                             if (f.evidence or {}).get("explanation")), None),
        # config findings the explanation defers to (audit.crashloop.deferred_to): then it
        # is evidence only, and no change of its own is shown
        "deferred_to": next(((f.evidence or {}).get("explanation_deferred_to") for f in ours
                             if (f.evidence or {}).get("explanation_deferred_to")), []),
    }


def past_fix(server: Server, rule_ids: list[str]) -> str | None:
    """The release that fixes the matched cause when the installed one is below it (the
    rule's ``fixed_in``): the command is made for it, so it does not reproduce the crash."""
    from packaging.version import InvalidVersion, Version

    from audit.rulebook import current_knowledge_base

    installed = server.installed_vllm_version or server.vllm_version
    rules = {r.id: r for r in current_knowledge_base().rules}
    for rule_id in rule_ids:
        fixed = getattr(rules.get(rule_id), "fixed_in", None)
        try:
            if fixed and installed and Version(installed) < Version(fixed):
                return fixed
        except InvalidVersion:
            continue
    return None


def _restarts(state: dict[str, Any], last_seen: str | None, window_s: int) -> int | None:
    from datetime import datetime

    if not last_seen:
        return None
    try:
        return restarts_in_window(state, datetime.fromisoformat(last_seen), window_s)
    except (TypeError, ValueError):
        return None


def installed_command(server: Server, entry: dict[str, Any], report: Report | None,
                      version: str | None = None) -> dict[str, Any] | None:
    """The recommender's command for this slot's argv on the installed release:
    ``{"version", "command", "status"}``, or None when it has none (or fails: a recommender
    bug must not take the host page down)."""
    report = report or Report.objects.filter(host_id=server.host_id).order_by(
        "-collected_at").first()
    version = version or server.installed_vllm_version or server.vllm_version or None
    if report is None or not version:
        return None
    synthetic = {"pid": server.pid or 1, "argv": entry.get("argv") or server.argv or ["?"],
                 "env": server.env or {}, "vllm_version": version,
                 "installed_vllm_version": version, "gpu_uuids": server.gpu_uuids or [],
                 "models": [], "errors": []}
    try:
        from advice.recommend import recommend_server

        result = recommend_server(synthetic, report.raw)
    except Exception:  # noqa: BLE001 - logged; the page shows "no recommendation"
        log.exception("recommendation for a failed start of server %s failed", server.pk)
        return None
    replicas = result.get("replicas") or []
    return {"version": (result.get("version") or {}).get("recommended"),
            "status": result.get("status"), "layout": result.get("layout"),
            "command": replicas[0]["command"] if replicas else None,
            "notes": (result.get("notes") or [])[:3]}
