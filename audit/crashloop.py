"""Failed starts and crash loops as findings.

Runs inside :func:`audit.evaluation.evaluate_report` (same transaction, host locked) for every
slot whose ``Server.failed_start`` came with the report being evaluated
(:func:`fleet.recording._record_failed_starts` put it there):

* **log signatures**: every rule whose ``log_signatures`` match one of the failed start's error
  lines (:meth:`audit.kb.engine.KnowledgeBase.match_log`) fires as "Server down: <rule title>"
  with the matching line as evidence, whatever the rule's condition says, at ``high``
  (``critical`` when the rule is critical or the slot is crash-looping);
* **explanation** (:mod:`audit.kb.failed_start_explain`): every failed start is explained
  from vLLM's own checks (the raise sites of the installed release), argv and the error lines:
  the setting that fed the failing check, its value, the change and the fix command. It rides
  on every failed-start finding as ``evidence.explanation``; when no rule's signature matches,
  it is the finding itself (:data:`FAILED_START_RULE_ID`, "Server down: …"). A rule's
  specific answer wins when it matches; the explanation is the fallback that is always there.
  It calls a setting "yours" only when the argv/env set it, offers the values that apply on
  the host's platform/GPU (:func:`server_platform`), and defers (evidence only,
  ``evidence.explanation_deferred_to``) to a high/critical config finding of the server when
  it names a setting the operator did not set or rests on a correlation (:func:`deferred_to`);
  an explanation that cannot name the cause alone (``confidence`` medium) stays medium;
  the other way round, a config finding that tells another story about the very setting a
  firm explanation names (a rule reading it whose signatures do not match this start) is
  resolved while the slot is down (:func:`_resolve_other_story`);
* **crash loop**: :data:`CRASH_LOOP_RULE_ID` opens when the slot restarted at least
  ``AUDIT_CRASH_LOOP_RESTARTS`` times within ``AUDIT_CRASH_LOOP_WINDOW_S`` seconds, even when no
  rule matched, with the last error line. It stays open (one finding, so one alert) while the
  loop lasts; the alerts route it as a risky upgrade that did not come back.

Both carry ``evidence.failed_start = true``. They resolve when the slot runs again (the normal
config evaluation resolves rules that no longer fire) or, for systemd/container sources, when
a report no longer lists the failed start.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings

from audit.kb.engine import SEVERITY_RANK, FindingResult, Rule
from audit.kb.failed_start_explain import Explanation, explain
from audit.kb.failed_start_facts import facts_of
from audit.models import Finding
from audit.outcomes import ServerOutcome, upsert_finding
from audit.remedy import remedy
from fleet.models import Host, Report, Server
from fleet_agent import shellwords

#: The built-in finding of a crash-looping slot (not a KB rule: it needs no condition).
CRASH_LOOP_RULE_ID = "crash-loop"
#: The built-in finding of a failed start no rule's log signature explains.
FAILED_START_RULE_ID = "failed-start"
#: Restarts within the window that make a crash loop (systemd's default StartLimitBurst is 5
#: per 10 s; an operator notices 3 failed starts in 10 minutes).
DEFAULT_CRASH_LOOP_RESTARTS = 3
#: The crash-loop window in seconds (10 minutes: 20 agent intervals of 30 s).
DEFAULT_CRASH_LOOP_WINDOW_S = 600
#: Sources whose failed start is re-read every cycle (so its absence means it is over).
_POLLED_SOURCES = ("systemd", "docker", "podman")


def crash_loop_settings() -> tuple[int, int]:
    """``(restarts, window_s)`` from settings, with the defaults above."""
    return (getattr(settings, "AUDIT_CRASH_LOOP_RESTARTS", DEFAULT_CRASH_LOOP_RESTARTS),
            getattr(settings, "AUDIT_CRASH_LOOP_WINDOW_S", DEFAULT_CRASH_LOOP_WINDOW_S))


def restarts_in_window(state: dict[str, Any], now: datetime, window_s: int) -> int:
    """Restarts of a slot within ``window_s`` seconds before ``now``, from its observations
    ``[[ISO time, cumulative restarts], ...]``: the newest count minus the newest count
    observed before the window. Without an observation before the window (the first reports
    of a loop), the counter itself counts when the last exit is inside the window."""
    observations = state.get("observations") or []
    if not observations:
        return 0
    start = now - timedelta(seconds=window_s)
    before = [count for at, count in observations if datetime.fromisoformat(at) <= start]
    latest = observations[-1][1]
    if before:
        return max(0, latest - before[-1])
    entry = state.get("entry") or {}
    exited = entry.get("last_exit_at")
    if exited and datetime.fromisoformat(exited) < start:
        return max(0, latest - observations[0][1])
    return max(latest, latest - observations[0][1])


def evaluate_failed_starts(kb: Any, host: Host, report: Report) -> list[Any]:
    """Open/update/resolve the failed-start findings of ``host`` for ``report``."""

    outcomes = []
    report_id = str(report.report_id)
    initial = None  # the host's first report: its findings pre-exist (alerts skip them)
    for server in host.servers.filter(failed_start__isnull=False):
        state = server.failed_start or {}
        if state.get("report_id") != report_id:
            _maybe_over(server, state, report)
            continue
        outcome = ServerOutcome(server.pk, ["failed_start"])
        if initial is None:
            initial = not Report.objects.filter(
                host=host, collected_at__lt=report.collected_at).exists()
        fired = _results(kb, server, state, report.collected_at, report.raw)
        active = {f.rule_id: f for f in server.findings.active()}
        for result in fired:
            upsert_finding(server, report, result, active.get(result.rule_id), kb.version,
                    initial, outcome)
        _resolve(server, {r.rule_id for r in fired}, report, outcome)
        if not server.is_running:
            _resolve_stale(kb, server, report, outcome)
            _resolve_other_story(kb, server, state, fired, report, outcome)
        outcomes.append(outcome)
    return outcomes


def _maybe_over(server: Server, state: dict[str, Any], report: Report) -> None:
    """A polled failed start that this report no longer lists is over (the unit was stopped
    or removed): resolve its findings. A vanished process is reported once, so it stays."""
    source = (state.get("entry") or {}).get("source")
    if server.is_running or source not in _POLLED_SOURCES:
        return
    if report.collected_at.isoformat() <= (state.get("last_seen") or ""):
        return
    _resolve(server, set(), report, None)


def _resolve_stale(kb: Any, server: Server, report: Report, outcome: Any) -> None:
    """A slot whose failed start is newer than its last running report: the old process is
    gone, so what its metrics said (cadence ``metrics``) and "restart pending" (rules reading
    ``pending_upgrade``: the restart happened and failed) no longer describe the server."""
    rules = {rule.id: rule for rule in kb.rules}
    for finding in server.findings.active():
        # in Python: a JSON key lookup in exclude() also drops rows that lack the key
        if (finding.evidence or {}).get("failed_start") is True:
            continue
        rule = rules.get(finding.rule_id)
        if rule is None or not (rule.cadence == "metrics"
                                or "pending_upgrade" in rule.condition_text):
            continue
        finding.resolve(report.collected_at)
        outcome.resolved.append(finding.rule_id)


def _resolve_other_story(kb: Any, server: Server, state: dict[str, Any],
                         fired: list[FindingResult], report: Report, outcome: Any) -> None:
    """One setting, one story: when this start's explanation names the operator's own
    setting with a change (vLLM's check read it; not a correlation, not deferred, not a
    medium-confidence guess), a config finding of a rule that reads the same setting and
    whose log signatures do not match this start tells another story about it (for
    --gpu-memory-utilization 0.95: "boots, then runs out of memory" while the start failed
    vLLM's free-memory check), so it is resolved while the slot is down. The next running
    report evaluates the configuration again and reopens it if it still holds."""
    stored = next((r.evidence.get("explanation") for r in fired
                   if r.rule_id == FAILED_START_RULE_ID), None)
    if not stored:
        return  # a rule's signature explains the start: that rule is the story
    explained = Explanation.from_dict(stored)
    if (explained.operator_set is not True or not explained.names_setting_and_change
            or not str(explained.setting).startswith("--") or explained.kind == "correlated"
            or explained.confidence is not None):
        return
    read = "flags." + explained.setting[2:].replace("-", "_")
    lines = ((state.get("entry") or {}).get("lines")) or []
    matching = {rule.id for rule, _ in kb.match_log(lines)}
    rules = {rule.id: rule for rule in kb.rules}
    for finding in server.findings.active():
        if (finding.evidence or {}).get("failed_start") is True:
            continue
        rule = rules.get(finding.rule_id)
        if (rule is None or rule.cadence != "config" or rule.id in matching
                or not re.search(re.escape(read) + r"\b", rule.condition_text)):
            continue
        finding.resolve(report.collected_at)
        outcome.resolved.append(finding.rule_id)


def _resolve(server: Server, keep: set[str], report: Report, outcome: Any) -> None:
    for finding in server.findings.active().filter(evidence__failed_start=True):
        if finding.rule_id not in keep:
            finding.resolve(report.collected_at)
            if outcome is not None:
                outcome.resolved.append(finding.rule_id)


def _results(kb: Any, server: Server, state: dict[str, Any], now: datetime,
             raw: dict[str, Any] | None = None) -> list[FindingResult]:
    """The findings of one failed start; ``raw``: the report it came with (its host, GPU
    and model facts feed the explanation)."""
    entry = state.get("entry") or {}
    lines = entry.get("lines") or []
    threshold, window_s = crash_loop_settings()
    restarts = restarts_in_window(state, now, window_s)
    looping = restarts >= threshold
    base = _evidence(server, state, restarts, window_s)
    platform, cc = server_platform(server)
    explained = explain(lines, entry.get("argv") or server.argv or [],
                        base["installed_vllm_version"] or server.vllm_version or None,
                        platform=platform, cc=cc, env=server.env or None,
                        facts=facts_of(raw or {}, entry))
    base["explanation"] = explained.as_dict()
    matched = kb.match_log(lines)
    deferred = deferred_to(server, explained)
    if deferred:
        base["explanation_deferred_to"] = deferred
    fix = incident_fix(server, [rule for rule, _ in matched], explained, kb.verified_through,
                       deferred=bool(deferred))
    out = [_signature_result(rule, line, base, looping, fix) for rule, line in matched]
    if not matched:
        out.append(_explained_result(explained, base, looping, fix, deferred))
    if looping:
        out.append(_crash_loop_result(server, base, restarts, window_s, matched, explained,
                                      fix))
    return out


def server_platform(server: Server) -> tuple[str | None, float | None]:
    """(platform, compute capability) of the server's host from its present GPUs: ``rocm``
    when one reports a gfx target (AMD SMI), ``cuda`` when one reports a compute capability
    (the lowest one is the GPU's limit); (None, None) when the host reports no GPU."""
    gpus = list(server.host.gpus.filter(is_present=True))
    if any(g.gfx_arch for g in gpus):
        return "rocm", None
    found = []
    for gpu in gpus:
        try:
            found.append(float(gpu.compute_capability))
        except ValueError:
            continue
    return ("cuda", min(found)) if found else (None, None)


#: Severities at which a config finding of the same server names a cause firmly enough
#: that a weaker explanation of the failed start defers to it.
_FIRM = ("high", "critical")


def deferred_to(server: Server, explained: Explanation) -> list[str]:
    """Rule ids of the server's active config findings (high/critical, not from a failed
    start) the explanation defers to: when it names a setting the operator did not set, or
    rests only on a correlation, a config rule that already names the cause is the answer,
    and the explanation is evidence only. Empty when it does not defer."""
    weak = explained.kind == "correlated" or (
        explained.setting is not None and explained.operator_set is not True)
    if not weak:
        return []
    return sorted({f.rule_id for f in server.findings.active().filter(severity__in=_FIRM)
                   if (f.evidence or {}).get("failed_start") is not True})


def remedy_text(explained: Explanation) -> str:
    """The change of an explanation with its fix command, as one remediation sentence."""
    if explained.change is None:
        return ("Read the full log of the unit/container, fix the cause or roll back to the "
                "last release and flags that ran.")
    text = explained.change[0].upper() + explained.change[1:] + "."
    if explained.fix_command:
        text += f" Fixed command: {explained.fix_command}"
    return text


def _whose_text(explained: Explanation) -> str:
    """Whose value fed the check: the operator's only when argv/env set it."""
    if not explained.setting:
        return ""
    if explained.operator_set:
        return (f" Your setting {explained.setting}"
                + (f" = {explained.value}" if explained.value is not None else "")
                + " fed that check.")
    if explained.operator_set is False:
        return (f" The check read {explained.setting}, left at vLLM's default"
                + (f" ({explained.default})" if explained.default is not None else "") + ".")
    return f" The check read {explained.setting}."


def _explained_result(explained: Explanation, base: dict[str, Any],
                      looping: bool, fix: str, deferred: list[str]) -> FindingResult:
    setting = _whose_text(explained)
    title = f"Server down: {explained.summary}"
    if deferred:  # the config finding names the cause: no second, different cause here
        setting = (f" The configuration finding {', '.join(deferred)} names the cause; this "
                   "start's explanation is kept as evidence only.")
        title = (f"Server down: vLLM stopped the start with \"{explained.error_line or ''}\"")
    # an explanation that cannot name the cause alone (confidence "medium") stays medium
    severity = "critical" if looping else "high"
    if explained.confidence == "medium":
        severity = "medium"
    return FindingResult(
        rule_id=FAILED_START_RULE_ID, severity=severity,
        kind="known_issue", title=title[:300],
        message=(f"{base['unit_or_container']} ({base['source']}) exits during start-up. "
                 + (f"vLLM checked: {explained.checked}." if explained.checked else "")
                 + setting)[:2000],
        remediation=" ".join(fix.split()), references=[],
        evidence={**base, "matched_line": explained.error_line}, checklist=[])


def _evidence(server: Server, state: dict[str, Any], restarts: int,
              window_s: int) -> dict[str, Any]:
    entry = state.get("entry") or {}
    lines = entry.get("lines") or []
    return {"failed_start": True, "source": entry.get("source"),
            "unit_or_container": entry.get("unit_or_container"),
            # quoted (fleet_agent.shellwords): agent data shown on pages must paste as the
            # literal argv only, with no control character reaching the terminal
            "argv": shellwords.join(entry.get("argv") or [], max_chars=2000),
            "image": entry.get("image"), "restart_count": entry.get("restart_count"),
            "exit_code": entry.get("exit_code"), "state": entry.get("state"),
            "last_exit_at": entry.get("last_exit_at"), "first_failed_at": state.get("first_seen"),
            "restarts_in_window": restarts, "window_minutes": window_s // 60,
            "last_error_line": lines[-1] if lines else None,
            "installed_vllm_version": server.installed_vllm_version or None,
            "last_running_vllm_version": server.vllm_version or None}


def server_remedy(server: Server, rules: list[Rule],
                  verified_through: str | None) -> dict[str, Any]:
    """The one remedy of this slot's failed start (audit.remedy), for the finding, the alert,
    the host page and the upgrade plan alike."""
    entry = (server.failed_start or {}).get("entry") or {}
    return remedy(ran=server.vllm_version or None,
                  installed=server.installed_vllm_version or None,
                  image=entry.get("image") or None, rules=rules,
                  verified_through=verified_through)


def incident_fix(server: Server, rules: list[Rule], explained: Explanation,
                 verified_through: str | None, *, deferred: bool = False) -> str:
    """One remediation sentence for this failed start, shown by every finding of it (so its
    alert), the host page and the plan: the incident's remedy (the release that ran pinned
    back, or the fixed release: audit.remedy), else the rule's remediation or, with no rule,
    the explanation's change; then this start's own change and fixed command when the
    explanation names a setting (the remedy says what to run, the explanation what to
    type). ``deferred``: a config finding names the cause (:func:`deferred_to`), so the
    explanation's change is not offered."""
    found = server_remedy(server, rules, verified_through)
    if found["kind"] != "rule":
        text = found["text"]
    elif rules:
        text = " ".join(rules[0].remediation.split())
    elif deferred:
        return ("A configuration finding of this server names the cause: apply its "
                "remediation.")
    else:
        return remedy_text(explained)
    if explained.names_setting_and_change and not deferred:
        text += " For this start: " + remedy_text(explained)
    return text


def _signature_result(rule: Rule, line: str, base: dict[str, Any],
                      looping: bool, fix: str) -> FindingResult:
    severity = "critical" if looping or rule.severity == "critical" else "high"
    if SEVERITY_RANK[severity] > SEVERITY_RANK[rule.severity]:
        severity = rule.severity  # never below the rule's own severity
    return FindingResult(
        rule_id=rule.id, severity=severity, kind=rule.kind,
        title=f"Server down: {rule.title}"[:300],
        message=(f"{base['unit_or_container']} ({base['source']}) exits during start-up with "
                 f"\"{line[:300]}\", the error this rule explains. The server does not come "
                 "back until the cause is fixed."),
        remediation=" ".join(fix.split()), references=list(rule.references),
        evidence={**base, "matched_line": line, "signature_rule": rule.id},
        checklist=list(rule.checklist))


def _crash_loop_result(server: Server, base: dict[str, Any], restarts: int, window_s: int,
                       matched: list[tuple[Rule, str]], explained: Explanation,
                       fix: str) -> FindingResult:
    upgraded = bool(server.installed_vllm_version and server.vllm_version
                    and server.installed_vllm_version != server.vllm_version)
    what = (f"after the upgrade from vLLM {server.vllm_version} to "
            f"{server.installed_vllm_version}" if upgraded else "")
    title = (f"Risky upgrade did not come back: {base['unit_or_container']} crash-looping"
             if upgraded else f"Crash loop: {base['unit_or_container']} keeps failing to start")
    last = base["last_error_line"] or "no error line was captured"
    causes = ", ".join(rule.id for rule, _ in matched) or \
        ", ".join(base.get("explanation_deferred_to") or []) or explained.summary
    return FindingResult(
        rule_id=CRASH_LOOP_RULE_ID, severity="critical", kind="crash_loop", title=title[:300],
        message=(f"{base['unit_or_container']} ({base['source']}) restarted {restarts} times in "
                 f"{window_s // 60} minutes {what} and is not serving. Last error line: "
                 f"\"{last[:300]}\" (matched: {causes})."),
        remediation=" ".join(fix.split()), references=[],
        evidence={**base, "matched_rules": [rule.id for rule, _ in matched],
                  "upgrade": upgraded})


def failed_start_findings(server: Server) -> list[Finding]:
    """Active findings that came from a failed start of ``server`` (for pages)."""
    return list(server.findings.active().filter(evidence__failed_start=True))


def incident_remedy(server: Server, findings: list[Finding] | None = None) -> dict[str, Any]:
    """The one remedy of this slot's current failed start, from the rules its findings
    matched (``findings``: its active failed-start findings, read when not given): the
    same text as the crash-loop finding and its alert, for the host page and the plan."""
    from audit.rulebook import current_knowledge_base

    kb = current_knowledge_base()
    by_id = {r.id: r for r in kb.rules}
    found = failed_start_findings(server) if findings is None else findings
    matched = [by_id[f.rule_id] for f in found
               if f.rule_id != CRASH_LOOP_RULE_ID and f.rule_id in by_id
               and (f.evidence or {}).get("failed_start")]
    found_remedy = server_remedy(server, matched, kb.verified_through)
    stored = next((f.evidence["explanation"] for f in found
                   if isinstance((f.evidence or {}).get("explanation"), dict)), None)
    if stored is not None:
        explained = Explanation.from_dict(stored)
        deferred = any((f.evidence or {}).get("explanation_deferred_to") for f in found)
        found_remedy["text"] = incident_fix(server, matched, explained, kb.verified_through,
                                            deferred=deferred)
    return found_remedy

