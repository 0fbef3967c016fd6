"""Evaluate one stored report against the knowledge base and update findings.

Flow per report (inside one transaction, so a worker killed half-way leaves
nothing behind and the redelivered task starts again):

1. claim the report row (``select_for_update(skip_locked=True)`` on an unevaluated
   row) and lock its host, so two workers never evaluate the same report and
   two reports of one host never race on the same findings; on PostgreSQL the claim, the
   lock and the "nothing due" decision take three statements (:mod:`audit.steady`) and
   the steps below run only when something is due;
2. per server, decide what is due: config rules when the config fingerprint
   (process, version, installed version, argv, env, template, GPUs, KB version)
   changed, metric rules when ``AUDIT_METRICS_INTERVAL_S`` passed since the last
   metric evaluation (the window then runs from that report to this one);
3. build the context of each server with rules due (:func:`audit.kb.context.build_context`),
   evaluate, then open / update / resolve findings and write :class:`~audit.models.FindingEvent`
   rows (the alerts outbox);
4. mark the report evaluated.

A report older than one already evaluated for the host (a late spool replay)
is marked evaluated without touching findings.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from audit import cadence, rows, steady
from audit.crashloop import evaluate_failed_starts
from audit.kb.context import config_key, config_part, finish_context, vllm_history
from audit.kb.engine import Evaluation
from audit.models import Finding, FindingEvent, RuleFailure, ServerAuditState
from audit.outcomes import ServerOutcome, upsert_finding
from audit.rulebook import current_knowledge_base
from fleet.models import ChangeEvent, Host, Report, Server, future_cutoff
from fleet.recording import server_identity

log = logging.getLogger(__name__)

#: Default spacing of metric-rule evaluations per server, in seconds (5 minutes).
DEFAULT_METRICS_INTERVAL_S = 300
#: Severities that make a version change a risky upgrade.
RISKY_SEVERITIES = ("critical", "high")


def evaluate_report(report_id: Any) -> list[ServerOutcome] | None:
    """Evaluate the report with this ``report_id`` (UUID or its string).

    Returns the per-server outcomes, or None when the report is gone, already
    evaluated, or being evaluated by another worker right now.
    """
    with transaction.atomic():
        if steady.supported():  # PostgreSQL: nothing due is decided first, in 3 statements
            claimed = steady.claim(report_id)
            if claimed is None:
                return None
            kb = current_knowledge_base()
            outcomes = steady.nothing_due(kb, claimed, future_cutoff(), _metrics_interval_s(),
                                          _identity, config_fingerprint)
            if outcomes is not None:
                return outcomes
            # Both rows are locked already; the report before it comes in the same statement.
            report, previous = steady.reports(claimed)
            # The locked host row as `.only("id")` would read it: the evaluation reads
            # nothing of it but its id (its servers and reports).
            host = Host.from_db(Host.objects.db, ["id"], [claimed.host_id])
            report._steady = _Known(kb, claimed, previous)  # what the full path need not read
        else:
            report = (Report.objects.select_for_update(skip_locked=True)
                      .filter(report_id=report_id, evaluated_at=None).first())
            if report is None:
                return None
            host = Host.objects.select_for_update().get(pk=report.host_id)
        outcomes = _evaluate_locked(host, report)
        report.evaluated_at = timezone.now()
        report.evaluation_error = "; ".join(
            f"{o.server_id}:{f}" for o in outcomes for f in o.failures)[:2000]
        rows.save(report, ["evaluated_at", "evaluation_error"])
    return outcomes


#: Evaluations of one report that may raise before it is marked evaluated with the error
#: (a poisoned report must not be re-enqueued by the sweep every minute forever).
MAX_EVALUATION_ATTEMPTS = 3


def record_failure(report_id: Any, exc: BaseException) -> bool:
    """Count a failed evaluation of ``report_id`` and keep its error; after
    :data:`MAX_EVALUATION_ATTEMPTS` the report is marked evaluated (given up). Returns True
    when it gave up."""
    message = f"{type(exc).__name__}: {exc}"[:1500]
    with transaction.atomic():
        report = (Report.objects.select_for_update()
                  .filter(report_id=report_id, evaluated_at=None).first())
        if report is None:
            return False
        report.evaluation_attempts += 1
        gave_up = report.evaluation_attempts >= MAX_EVALUATION_ATTEMPTS
        report.evaluation_error = (f"evaluation failed {report.evaluation_attempts} time(s)"
                                   f"{', given up' if gave_up else ''}: {message}")
        if gave_up:
            report.evaluated_at = timezone.now()
        report.save(update_fields=["evaluation_attempts", "evaluation_error", "evaluated_at"])
    return gave_up


class _Known(NamedTuple):
    """What the PostgreSQL path read before deciding that something is due (on the report
    as ``_steady``): the knowledge base and the claim, with the host's newest evaluated
    report and whether a server has a failed start (:class:`audit.steady.Claim`), and the
    host's report before this one (None when there is none)."""

    kb: Any
    claim: steady.Claim
    previous: Report | None


def _evaluate_locked(host: Host, report: Report) -> list[ServerOutcome]:
    known: _Known | None = getattr(report, "_steady", None)
    if known is None:
        newest = (Report.objects.filter(host=host, evaluated_at__isnull=False,
                                        collected_at__lte=future_cutoff())
                  .order_by("-collected_at").values_list("collected_at", flat=True).first())
    else:  # read after the host lock, in this transaction: nobody evaluated since
        newest = known.claim.newest
    if newest is not None and report.collected_at < newest:
        return []  # a late replay: history is stored, current findings stay as they are
    if known is None:
        kb = current_knowledge_base()
        # Without its raw body: only a context built for a server with rules due reads it (a
        # nothing-due report must not load and decode a second 50 KB report), and a deferred
        # field costs a second query when it is read.
        previous = (Report.objects.filter(host=host, collected_at__lt=report.collected_at)
                    .order_by("-collected_at").defer("raw").first())
        servers = {s.identity: (s, _audit_state(s)) for s in host.servers
                   .select_related("audit_state").defer(*_UNREAD_SERVER_FIELDS)}
    else:  # something is due: the previous report was read with this one
        kb, previous = known.kb, known.previous
        servers = steady.servers(host.pk)
    contexts = _LazyContexts(report, previous, kb.version)
    outcomes = []
    for index, raw_server in enumerate(report.raw.get("servers") or []):
        found = servers.get(_identity(raw_server))
        if found is None:
            continue
        server, state = found
        outcomes.append(_evaluate_server(kb, server, state, report, index, contexts,
                                         previous))

    if known is None or known.claim.failed_start:  # else no server of the host has one
        outcomes.extend(evaluate_failed_starts(kb, host, report))
    return outcomes


def _audit_state(server: Server) -> ServerAuditState | None:
    """The server's audit state as selected with it, None when it has none yet."""
    try:
        return server.audit_state
    except ServerAuditState.DoesNotExist:
        return None


#: Server columns the evaluation never reads (the report's own entry says it all): not
#: decoded on every evaluation (``last_metrics_snapshot`` is a whole scrape's numbers).
_UNREAD_SERVER_FIELDS = ("argv", "env", "model_ids", "gpu_uuids", "errors",
                         "last_metrics_snapshot", "failed_start", "kubernetes")


class _Slot(NamedTuple):
    """What :func:`fleet.recording.server_identity` reads of a ``ServerInfo``."""

    base_url: str | None
    argv: list[str]


def _identity(raw_server: dict) -> str:
    """The server's slot from its stored (already validated) raw entry, without validating
    the whole entry again (its /metrics text is 50 KB): only base_url and argv matter."""
    argv = raw_server.get("argv")
    slot = _Slot(raw_server.get("base_url"), argv if isinstance(argv, list) else [])
    return server_identity(slot)  # type: ignore[arg-type]  (duck-typed: the two fields)


class _LazyContexts:
    """Contexts of one report, each built only when its server has rules due: in steady
    state (no config change, metric window not elapsed) a report costs no parsing here.
    What reads the report alone (:func:`audit.kb.context.config_part`) is built once per
    server, whatever the earlier report a context is built against."""

    def __init__(self, report: Report, previous: Report | None, kb_version: str) -> None:
        self.report, self.previous, self.kb_version = report, previous, kb_version
        self._built: dict[int, dict] = {}
        self._parts: dict[int, dict] = {}

    def __getitem__(self, index: int) -> dict:
        if index not in self._built:
            self._built[index] = self.for_history(index, self.previous)
        return self._built[index]

    def _part(self, index: int) -> dict:
        if index not in self._parts:
            raw = self.report.raw
            self._parts[index] = _config_part(raw["servers"][index], raw, self.kb_version)
        return self._parts[index]

    def for_history(self, index: int, earlier: Report | None) -> dict:
        """Context of server ``index`` with ``earlier`` as the report before it."""
        raw = self.report.raw
        return finish_context(self._part(index), raw["servers"][index], raw,
                              [earlier.raw] if earlier else [])

    def vllm(self, index: int) -> dict:
        """``self[index]["vllm"]`` without building the rest of that context."""
        if index in self._built:
            return self._built[index]["vllm"]
        raw = self.report.raw
        history = [self.previous.raw] if self.previous else []
        return vllm_history(self._part(index), raw["servers"][index], history)


#: Config parts (:func:`audit.kb.context.config_part`) of the servers this process evaluated
#: lately, by :func:`audit.kb.context.config_key` and KB version, least recently used first:
#: a metric evaluation of a server whose configuration did not change reuses its part (a
#: third of its CPU). Parts are shared and never modified. Bounded: about 40 KB each.
_PARTS: OrderedDict[tuple[str, str], dict] = OrderedDict()
PART_CACHE_SIZE = 1024


_PARTS_LOCK = threading.Lock()


def _config_part(raw_server: dict, raw: dict, kb_version: str) -> dict:
    key = (config_key(raw_server, raw), kb_version)
    with _PARTS_LOCK:
        part = _PARTS.get(key)
        if part is not None:
            _PARTS.move_to_end(key)
            return part
    part = config_part(raw_server, raw)
    with _PARTS_LOCK:
        _PARTS[key] = part
        if len(_PARTS) > PART_CACHE_SIZE:
            _PARTS.popitem(last=False)
    return part


def _evaluate_server(kb: Any, server: Server, state: ServerAuditState | None, report: Report,
                     index: int, contexts: _LazyContexts,
                     previous: Report | None) -> ServerOutcome:
    raw_server = report.raw["servers"][index]
    if state is None:  # none selected with the server
        state = ServerAuditState.objects.create(server=server)
    fingerprint = config_fingerprint(raw_server, report.raw.get("gpus") or [], kb.version)
    run_config = fingerprint != state.config_fingerprint
    run_metrics = run_config or cadence.metrics_due(
        state.metrics_evaluated_at, report.collected_at, report.host_id, _metrics_interval_s())
    cadences = [c for c, due in (("config", run_config), ("metrics", run_metrics)) if due]
    outcome = ServerOutcome(server.pk, cadences)
    _still_seen(server, report, kb, {"config", "metrics"} - set(cadences))
    if not cadences:
        return outcome
    results, vllm, full = _run(kb, server, report, cadences, contexts, index, state, previous)
    initial = server.first_seen >= report.collected_at
    _apply(server, report, kb, cadences, results, outcome, initial)
    _server_events(server, report, vllm, full, kb, outcome, initial)
    changed = []
    if run_config:
        state.config_fingerprint, state.config_evaluated_at = fingerprint, report.collected_at
        changed += ["config_fingerprint", "config_evaluated_at"]
    if run_metrics:
        state.metrics_evaluated_at, state.metrics_baseline = report.collected_at, report
        changed += ["metrics_evaluated_at", "metrics_baseline"]
    rows.save(state, changed)
    return outcome


#: Restarts without a version/config/template change are counted over this window (K18).
RESTART_WINDOW = timedelta(hours=24)
_CHANGE_KINDS = ("version_changed", "config_changed", "template_changed")


def _with_restart_history(ctx: dict, server: Server, report: Report) -> dict:
    """The context built from one previous report sees at most one restart; count the
    server's bare restarts (no version, flag or template change in the same report) over
    the last 24 h from its change history so "restarted twice" escalates (seed 000,
    "One restart = fail")."""
    vllm = ctx.get("vllm") or {}
    counted = _restart_vllm(vllm, server, report)
    return ctx if counted is vllm else {**ctx, "vllm": counted}


def _restart_vllm(vllm: dict, server: Server, report: Report) -> dict:
    """``vllm`` (a context's block, not modified) with the restarts counted over
    :data:`RESTART_WINDOW` when it restarted (:func:`_with_restart_history`), else itself."""
    if not vllm.get("restarted"):
        return vllm
    since = report.collected_at - RESTART_WINDOW
    restarts = ChangeEvent.objects.filter(server=server, kind=ChangeEvent.Kind.RESTART,
                                          at__gt=since, at__lte=report.collected_at)
    changed = ChangeEvent.objects.filter(server=server, kind__in=_CHANGE_KINDS,
                                         at__gt=since).values("report_id")
    bare = restarts.exclude(report_id__in=changed).count()
    return {**vllm, "restarts": max(bare, vllm.get("restarts") or 0)}


def _still_seen(server: Server, report: Report, kb: Any, skipped: set[str]) -> None:
    """Rules not due this time are presumed still firing: refresh their last_seen, once it
    is ``AUDIT_FINDING_SEEN_REFRESH_S`` old (bounded staleness, :mod:`audit.steady`)."""
    if not skipped:
        return
    if steady.supported():  # one statement, the rule ids bound as one string
        steady.refresh_seen(server.pk, report.pk, report.collected_at,
                            steady.rule_ids(kb, tuple(sorted(skipped))))
        return
    rule_ids = [rule.id for rule in kb.rules if rule.cadence in skipped]
    stale = report.collected_at - timedelta(seconds=steady.seen_refresh_s())
    server.findings.active().filter(rule_id__in=rule_ids, last_seen__lte=stale).update(
        last_seen=report.collected_at, last_report=report)


def _run(kb: Any, server: Server, report: Report, cadences: list[str],
         contexts: _LazyContexts, index: int, state: ServerAuditState,
         previous: Report | None) -> tuple[Evaluation, dict, Callable[[], dict]]:
    """Evaluate the due rules; returns the results, the ``vllm`` block of the context against
    the previous report (restarts counted, :func:`_with_restart_history`) and a callable
    giving that whole context (the server's events read it)."""
    # A config change always re-runs the metric rules too, so the cadences are either both
    # or metrics alone.
    baseline = state.metrics_baseline_id
    if "config" in cadences or baseline is None or previous is None or baseline == previous.pk:
        ctx = _with_restart_history(contexts[index], server, report)
        results = kb.evaluate(ctx) if "config" in cadences else kb.evaluate(
            ctx, cadence="metrics")
        return results, ctx.get("vllm") or {}, lambda: ctx
    # The metric window runs from the last metric evaluation to this report; the context
    # against the previous report is built in full only if an event needs it.
    start = (steady.report_raw(baseline) if steady.supported()  # its raw body alone
             else Report.objects.only("id", "raw").get(pk=baseline))
    results = kb.evaluate(contexts.for_history(index, start), cadence="metrics")
    vllm = _restart_vllm(contexts.vllm(index), server, report)
    return results, vllm, lambda: {**contexts[index], "vllm": vllm}


def _metrics_interval_s() -> int:
    return getattr(settings, "AUDIT_METRICS_INTERVAL_S", DEFAULT_METRICS_INTERVAL_S)


def config_fingerprint(raw_server: dict, gpus: list[dict], kb_version: str) -> str:
    """sha256 over what config rules read: process identity, versions, argv, env,
    template, GPU names/uuids, live-probe results and the knowledge-base version. A restart
    changes it
    too, so restart rules re-run."""
    template = raw_server.get("chat_template") or {}
    material = {
        "pid": raw_server.get("pid"), "started_at": raw_server.get("started_at"),
        "version": raw_server.get("vllm_version"),
        "installed": raw_server.get("installed_vllm_version"),
        "argv": raw_server.get("argv"), "env": raw_server.get("env"),
        "template": [template.get("sha256"), template.get("size_bytes")],
        "models": raw_server.get("models"), "gpu_uuids": raw_server.get("gpu_uuids"),
        "gpus": sorted((g.get("uuid", ""), g.get("name", "")) for g in gpus),
        "kb": kb_version,
        # a new live-probe result changes what the advisories say
        "probes": sorted((str(p.get("name")), str(p.get("ran_at")), str(p.get("outcome")))
                         for p in raw_server.get("probes") or [] if isinstance(p, dict)),
    }
    blob = json.dumps(material, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()


def _apply(server: Server, report: Report, kb: Any, cadences: list[str],
           results: Evaluation, outcome: ServerOutcome, initial: bool) -> None:
    at = report.collected_at
    fired = {r.rule_id: r for r in results}
    failed = {f.rule_id for f in results.failures}
    for failure in results.failures:
        RuleFailure.objects.create(server=server, report=report, rule_id=failure.rule_id,
                                   error=failure.error[:4000])
        outcome.failures.append(failure.rule_id)
    known = _cadences(kb)
    active = {}
    for finding in rows.load(Finding, _ACTIVE_SQL, [server.pk]):
        cadence = known.get(finding.rule_id)
        in_scope = cadence in cadences or (cadence is None and "config" in cadences)
        if in_scope and finding.rule_id not in fired and finding.rule_id not in failed:
            finding.resolve(at)
            outcome.resolved.append(finding.rule_id)
        else:  # still active, in the same order a second read would give
            active[finding.rule_id] = finding
    for rule_id, result in fired.items():
        upsert_finding(server, report, result, active.get(rule_id), kb.version, initial, outcome)


#: ``server.findings.active()`` (the model's order) without compiling it on every report.
_ACTIVE_SQL = (f"SELECT {rows.columns(Finding, 'f')} FROM audit_finding f "  # noqa: S608
               "WHERE server_id = %s AND status <> 'resolved' ORDER BY last_seen DESC")

_CADENCES: dict[tuple[int, str], dict[str, str]] = {}


def _cadences(kb: Any) -> dict[str, str]:
    """``{rule id: cadence}`` of ``kb``, kept per loaded knowledge base (the newest few)."""
    key = (id(kb), kb.version)
    found = _CADENCES.get(key)
    if found is None:
        if len(_CADENCES) > 16:
            _CADENCES.clear()
        found = _CADENCES[key] = {rule.id: rule.cadence for rule in kb.rules}
    return found


def _server_events(server: Server, report: Report, vllm: dict, ctx: Callable[[], dict],
                   kb: Any, outcome: ServerOutcome, initial: bool) -> None:
    """Events about the server itself: version change, pending upgrade, bare restart;
    ``vllm`` is the block of the context ``ctx()`` (built only when a preview needs it)."""
    at = report.collected_at
    versions = _changes_since_last_evaluation(server, report, ChangeEvent.Kind.VERSION_CHANGED)
    if versions and versions[0].old_value != versions[-1].new_value:
        _event(server, FindingEvent.Kind.VERSION_CHANGED, at, initial, {
            "old": versions[0].old_value, "new": versions[-1].new_value,
            "opened": _severe(server, outcome.opened), "resolved": outcome.resolved})
    if vllm.get("pending_upgrade") and _pending_is_new(server, vllm.get("installed")):
        _event(server, FindingEvent.Kind.PENDING_UPGRADE, at, initial, {
            "running": vllm.get("version_raw") or vllm.get("version"),
            "installed": vllm.get("installed"),
            "would_open": would_open_on(kb, ctx(), vllm.get("installed"))})
    if vllm.get("restarted_without_change"):
        _event(server, FindingEvent.Kind.RESTARTED_WITHOUT_CHANGE, at, initial,
               {"restarts": vllm.get("restarts")})


#: The query below in one statement (the ORM's compilation of it cost more CPU than running
#: it); PostgreSQL only (the typed NULL test). The column list is the model's own.
_CHANGES_SQL = f"""
SELECT {rows.columns(ChangeEvent, "c")}
  FROM fleet_changeevent c JOIN fleet_report r ON r.id = c.report_id
 WHERE c.server_id = %(server)s AND c.kind = %(kind)s AND r.collected_at <= %(at)s
   AND (%(last)s::timestamptz IS NULL OR r.collected_at > %(last)s)
 ORDER BY r.collected_at, c.id
"""  # noqa: S608


def _changes_since_last_evaluation(server: Server, report: Report,
                                    kind: str) -> list[ChangeEvent]:
    """``kind`` changes recorded by this report and by the host's reports collected since
    the last evaluated one, oldest first. Those reports are skipped as late replays when a
    newer one is evaluated first (two workers, spool replay), so their changes count here."""
    known: _Known | None = getattr(report, "_steady", None)
    if known is not None:  # PostgreSQL; read after the host lock: none was evaluated since
        return rows.load(ChangeEvent, _CHANGES_SQL, {
            "server": server.pk, "kind": kind, "at": report.collected_at,
            "last": known.claim.last_evaluated})
    last = (Report.objects.filter(host_id=server.host_id, evaluated_at__isnull=False,
                                  collected_at__lt=report.collected_at)
            .order_by("-collected_at").values_list("collected_at", flat=True).first())
    changes = ChangeEvent.objects.filter(server=server, kind=kind,
                                         report__collected_at__lte=report.collected_at)
    if last is not None:
        changes = changes.filter(report__collected_at__gt=last)
    return list(changes.order_by("report__collected_at", "id"))


def _event(server: Server, kind: str, at: datetime, initial: bool, payload: dict) -> None:
    FindingEvent.objects.create(kind=kind, host_id=server.host_id, server=server, at=at,
                                initial=initial, payload=payload)


def _severe(server: Server, rule_ids: list[str]) -> list[dict[str, str]]:
    rows = server.findings.active().filter(rule_id__in=rule_ids,
                                           severity__in=RISKY_SEVERITIES)
    return [{"rule_id": f.rule_id, "severity": f.severity, "title": f.title} for f in rows]


def _pending_is_new(server: Server, installed: str | None) -> bool:
    """True unless an earlier event already announced this installed version."""
    return bool(installed) and not FindingEvent.objects.filter(
        server=server, kind=FindingEvent.Kind.PENDING_UPGRADE,
        payload__installed=installed).exists()


def would_open_on(kb: Any, ctx: dict, target: str | None) -> list[dict[str, str]]:
    """Findings of severity high or above that ``ctx`` would raise on vLLM ``target``
    and does not raise now (the pending-upgrade preview)."""
    if not target:
        return []
    now = {r.rule_id for r in kb.evaluate(ctx, cadence="config")}
    vllm = dict(ctx.get("vllm") or {})
    vllm.update(version=target, version_raw=target, installed=target, pending_upgrade=False)
    after = kb.evaluate({**ctx, "vllm": vllm}, cadence="config")
    return [{"rule_id": r.rule_id, "severity": r.severity, "title": r.title}
            for r in after if r.rule_id not in now and r.severity in RISKY_SEVERITIES]
