"""The nothing-due path of :func:`audit.evaluation.evaluate_report` in three statements.

Most reports change nothing (same process, same flags, metric window not elapsed):
they used to cost eleven round trips (claim, host lock, newest evaluated, previous report,
servers, audit state, the ``last_seen`` refresh, failed starts, the report update) and a
decode of the 50 KB raw body. Here, on PostgreSQL:

1. :func:`claim`: one ``SELECT ... FOR UPDATE OF r SKIP LOCKED FOR UPDATE OF h``: the report
   row is claimed (skipped when another worker holds it) and its host locked (waiting, as
   before), returning the report's servers **without** their ``/metrics`` text and its GPUs;
2. :func:`nothing_due`: one ``SELECT`` after the locks (a fresh snapshot, so a report
   evaluated by the worker that held the host lock is seen): the newest evaluated report of
   the host (late replay), whether any server has a failed start, and each server's audit
   state with "metric window elapsed" computed in SQL;
3. one ``UPDATE`` of the report, with the ``last_seen`` refresh of the still-firing findings
   as a data-modifying CTE of the same statement.

When anything is due (a new fingerprint, the metric window, a missing audit state, a failed
start on the host), :func:`nothing_due` returns None and the full evaluation runs on the
rows already locked: the decision "nothing due" is taken before any other work.

**Bounded staleness of ``last_seen``**: a finding presumed still firing is refreshed only
when its ``last_seen`` is ``AUDIT_FINDING_SEEN_REFRESH_S`` (default 300 s, the metric rules'
interval) or more older than the report; most reports then update no finding row. The page
of a finding thus shows a last_seen (and last report) at most that old while it fires.

Other databases (the SQLite demo) take the full path every time (:func:`supported`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection
from django.utils import timezone

from audit import cadence, rows
from audit.outcomes import ServerOutcome

_CLAIM_SQL = """
SELECT r.id, r.host_id, r.collected_at,
       json_build_object(
         'servers', CASE WHEN jsonb_typeof(r.raw -> 'servers') = 'array' THEN
           (SELECT coalesce(json_agg(CASE WHEN jsonb_typeof(s) = 'object'
                                          THEN s - 'metrics' ELSE s END), '[]')
            FROM jsonb_array_elements(r.raw -> 'servers') AS s)
           ELSE '[]' END,
         'gpus', r.raw -> 'gpus')
FROM fleet_report r JOIN fleet_host h ON h.id = r.host_id
WHERE r.report_id = %s AND r.evaluated_at IS NULL
FOR UPDATE OF r SKIP LOCKED FOR UPDATE OF h
"""

_STATE_SQL = """
SELECT
  (SELECT max(collected_at) FROM fleet_report
    WHERE host_id = %(host)s AND evaluated_at IS NOT NULL AND collected_at <= %(cutoff)s),
  EXISTS (SELECT 1 FROM fleet_server WHERE host_id = %(host)s AND failed_start IS NOT NULL),
  (SELECT max(collected_at) FROM fleet_report
    WHERE host_id = %(host)s AND evaluated_at IS NOT NULL AND collected_at < %(at)s),
  (SELECT coalesce(json_agg(json_build_array(
            s.id, s.identity, a.config_fingerprint, a.metrics_evaluated_at)), '[]')
     FROM fleet_server s LEFT JOIN audit_serverauditstate a ON a.server_id = s.id
    WHERE s.host_id = %(host)s)
"""

#: The ``last_seen`` refresh of the findings of rules not due on one server (the full path's
#: version of the CTE above).
_SEEN_SQL = """
UPDATE audit_finding SET last_seen = %(at)s, last_report_id = %(report)s
 WHERE server_id = %(server)s AND status <> 'resolved'
   AND rule_id = ANY(string_to_array(%(rules)s, ',')) AND last_seen <= %(stale)s
"""

_DONE_SQL = """
WITH seen AS (
  UPDATE audit_finding SET last_seen = %(at)s, last_report_id = %(report)s
   WHERE server_id = ANY(%(servers)s) AND status <> 'resolved'
     AND rule_id = ANY(string_to_array(%(rules)s, ','))
     AND last_seen <= %(stale)s
)
UPDATE fleet_report SET evaluated_at = %(now)s, evaluation_error = '' WHERE id = %(report)s
"""


@dataclass
class Claim:
    """A claimed report: row id, host id, collected_at and its raw body without /metrics
    (``{"servers": [...], "gpus": [...]}``)."""

    id: int
    host_id: int
    collected_at: datetime
    lite: dict[str, Any]
    #: What :func:`nothing_due` read, for the full path when it returns None (so that path
    #: does not read it again): the host's newest evaluated report's ``collected_at``
    #: (any, and before this report), whether a server has a failed start.
    newest: datetime | None = None
    last_evaluated: datetime | None = None
    failed_start: bool = True


def supported() -> bool:
    """True on PostgreSQL (the statements above use its JSON functions and lock clauses)."""
    return connection.vendor == "postgresql"


def claim(report_id: Any) -> Claim | None:
    """Claim the unevaluated report ``report_id`` and lock its host (inside a transaction);
    None when it is gone, evaluated, or claimed by another worker."""
    with connection.cursor() as cursor:
        cursor.execute(_CLAIM_SQL, [str(report_id)])
        row = cursor.fetchone()
    if row is None:
        return None
    lite = json.loads(row[3]) if isinstance(row[3], str | bytes) else row[3]
    return Claim(row[0], row[1], row[2], lite)


def seen_refresh_s() -> int:
    """``AUDIT_FINDING_SEEN_REFRESH_S`` (see the module docstring)."""
    return settings.AUDIT_FINDING_SEEN_REFRESH_S


def nothing_due(kb: Any, found: Claim, cutoff: datetime, metrics_interval_s: int,
                identity: Any, fingerprint: Any) -> list[ServerOutcome] | None:
    """Finish the claimed report when nothing is due for it and return its outcomes
    (``[]`` for a late replay, else one ``ServerOutcome`` with no cadence per known server);
    None, having written nothing, when the full evaluation must run.

    ``identity(raw_server) -> str`` and ``fingerprint(raw_server, gpus, kb_version) -> str``
    are the evaluation's own (so both paths decide alike).
    """
    at = found.collected_at
    with connection.cursor() as cursor:
        cursor.execute(_STATE_SQL, {"host": found.host_id, "cutoff": cutoff, "at": at})
        newest, failed_start, last_evaluated, rows = cursor.fetchone()
    found.newest, found.last_evaluated, found.failed_start = newest, last_evaluated, failed_start
    if newest is not None and at < newest:
        _done(found, [], "")  # a late replay: history is stored, findings stay
        return []
    if failed_start:
        return None  # crashloop.evaluate_failed_starts has work (or may): the full path
    rows = json.loads(rows) if isinstance(rows, str | bytes) else rows
    servers = {identity_: (pk, fp, cadence.metrics_due(
        None if last is None else datetime.fromisoformat(last), at, found.host_id,
        metrics_interval_s)) for pk, identity_, fp, last in rows}
    gpus = found.lite.get("gpus") or []
    outcomes = []
    for raw_server in found.lite.get("servers") or []:
        known = servers.get(identity(raw_server))
        if known is None:
            continue
        pk, stored, metrics_due = known
        if metrics_due or not stored or fingerprint(raw_server, gpus, kb.version) != stored:
            return None
        outcomes.append(ServerOutcome(pk, []))
    _done(found, [o.server_id for o in outcomes], rule_ids(kb, ("config", "metrics")))
    return outcomes


_RULE_IDS: dict[tuple[int, str, tuple[str, ...]], str] = {}


def rule_ids(kb: Any, cadences: tuple[str, ...]) -> str:
    """The ids of ``kb``'s rules of ``cadences``, comma-joined (ids are ``[a-z0-9-]``,
    :data:`audit.kb.engine.ID_RE`): bound as one text parameter and split by PostgreSQL
    (``string_to_array``), since binding ~200 strings as an array costs the worker more
    CPU than the rest of a nothing-due report. Cached per loaded knowledge base (a new
    version drops the old entries)."""
    key = (id(kb), kb.version, cadences)
    joined = _RULE_IDS.get(key)
    if joined is None:
        if len(_RULE_IDS) > 16:  # only a KB reload adds keys: keep the newest few
            _RULE_IDS.clear()
        joined = _RULE_IDS[key] = ",".join(r.id for r in kb.rules if r.cadence in cadences)
    return joined


def refresh_seen(server_id: int, report_id: int, at: datetime, rules: str) -> None:
    """Refresh ``last_seen`` (and the last report) of ``server_id``'s active findings of the
    comma-joined ``rules`` once it is :func:`seen_refresh_s` old (PostgreSQL)."""
    stale = at - timedelta(seconds=seen_refresh_s())
    with connection.cursor() as cursor:
        cursor.execute(_SEEN_SQL, {"at": at, "report": report_id, "server": server_id,
                                   "rules": rules, "stale": stale})


#: The claimed report and the host's report before it (any, evaluated or not), in one
#: statement: what ``Report.objects.get`` and the ORM's ``.order_by("-collected_at").first()``
#: of the full path read, without compiling either.
_REPORTS_SQL = """
SELECT r.report_id, r.raw, p.id, p.collected_at, p.raw
  FROM fleet_report r LEFT JOIN LATERAL (
    SELECT id, collected_at, raw FROM fleet_report
     WHERE host_id = r.host_id AND collected_at < r.collected_at
     ORDER BY collected_at DESC LIMIT 1) p ON true
 WHERE r.id = %s
"""


def reports(found: Claim) -> tuple[Any, Any]:
    """The claimed report and the host's report collected just before it (None when there
    is none), as ``Report`` instances with the fields the evaluation reads (``id``,
    ``host_id``, ``report_id``, ``collected_at``, ``raw``; ``id``, ``collected_at``, ``raw``
    of the earlier one; any other field is loaded when read)."""
    from fleet.models import Report

    with connection.cursor() as cursor:
        cursor.execute(_REPORTS_SQL, [found.id])
        report_id, raw, prev_id, prev_at, prev_raw = cursor.fetchone()
    report = rows.instance(Report, {"id": found.id, "host_id": found.host_id,
                                    "report_id": report_id, "collected_at": found.collected_at,
                                    "raw": rows.json_value(raw)})
    previous = None if prev_id is None else rows.instance(
        Report, {"id": prev_id, "collected_at": prev_at, "raw": rows.json_value(prev_raw)})
    return report, previous


def report_raw(pk: int) -> Any:
    """``Report.objects.only("id", "raw").get(pk=pk)`` without compiling it. Raises
    ``Report.DoesNotExist`` when the row is gone."""
    from fleet.models import Report

    with connection.cursor() as cursor:
        cursor.execute("SELECT raw FROM fleet_report WHERE id = %s", [pk])
        row = cursor.fetchone()
    if row is None:
        raise Report.DoesNotExist(f"no report {pk}")
    return rows.instance(Report, {"id": pk, "raw": rows.json_value(row[0])})


_SERVERS_SQL = """
SELECT s.id, s.host_id, s.identity, s.first_seen, a.id, a.config_fingerprint,
       a.config_evaluated_at, a.metrics_evaluated_at, a.metrics_baseline_id
  FROM fleet_server s LEFT JOIN audit_serverauditstate a ON a.server_id = s.id
 WHERE s.host_id = %s
"""
#: What the evaluation reads of a server (the rest is its report entry's) and of its state
#: (every field), in the statement's order.
_SERVER_FIELDS = ("id", "host_id", "identity", "first_seen")
_STATE_FIELDS = ("id", "config_fingerprint", "config_evaluated_at", "metrics_evaluated_at",
                 "metrics_baseline_id")


def servers(host_id: int) -> dict[str, tuple[Any, Any]]:
    """``{identity: (server, audit state or None)}`` of the host's servers, in one
    statement (the ORM's ``select_related("audit_state")`` compiled every time cost more
    CPU than running it). Servers carry :data:`_SERVER_FIELDS` (any other field is loaded
    when read); states every field."""
    from audit.models import ServerAuditState
    from fleet.models import Server

    with connection.cursor() as cursor:
        cursor.execute(_SERVERS_SQL, [host_id])
        fetched = cursor.fetchall()
    found = {}
    for row in fetched:
        server = rows.instance(Server, dict(zip(_SERVER_FIELDS, row[:4], strict=True)))
        state = None if row[4] is None else rows.instance(
            ServerAuditState, {**dict(zip(_STATE_FIELDS, row[4:], strict=True)),
                               "server_id": row[0]})
        found[server.identity] = (server, state)
    return found


def _done(found: Claim, server_ids: list[int], rules: str) -> None:
    stale = found.collected_at - timedelta(seconds=seen_refresh_s())
    with connection.cursor() as cursor:
        cursor.execute(_DONE_SQL, {"at": found.collected_at, "report": found.id,
                                   "servers": server_ids, "rules": rules, "stale": stale,
                                   "now": timezone.now()})
