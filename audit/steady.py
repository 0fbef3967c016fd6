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
            s.id, s.identity, a.config_fingerprint,
            a.metrics_evaluated_at IS NULL
              OR %(at)s - a.metrics_evaluated_at >= make_interval(secs => %(interval)s))), '[]')
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
        cursor.execute(_STATE_SQL, {"host": found.host_id, "cutoff": cutoff, "at": at,
                                    "interval": metrics_interval_s})
        newest, failed_start, last_evaluated, rows = cursor.fetchone()
    found.newest, found.last_evaluated, found.failed_start = newest, last_evaluated, failed_start
    if newest is not None and at < newest:
        _done(found, [], "")  # a late replay: history is stored, findings stay
        return []
    if failed_start:
        return None  # crashloop.evaluate_failed_starts has work (or may): the full path
    rows = json.loads(rows) if isinstance(rows, str | bytes) else rows
    servers = {identity_: (pk, fp, due) for pk, identity_, fp, due in rows}
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


def _done(found: Claim, server_ids: list[int], rules: str) -> None:
    stale = found.collected_at - timedelta(seconds=seen_refresh_s())
    with connection.cursor() as cursor:
        cursor.execute(_DONE_SQL, {"at": found.collected_at, "report": found.id,
                                   "servers": server_ids, "rules": rules, "stale": stale,
                                   "now": timezone.now()})
