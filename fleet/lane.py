"""The steady lane: a report that changes nothing but metrics and GPU readings is applied in
the request, in one statement, and never queued.

Most reports of a healthy fleet are such reports (same processes, flags, models, template,
GPUs; the metric rules due every ``AUDIT_METRICS_INTERVAL_S``). Through the worker each cost
a queue message, a derivation of about fifteen ORM statements and an evaluation that found
nothing due. Here, on PostgreSQL:

1. ingest computes :func:`steady_key` of the (redacted) body: a sha256 of everything but
   the identifiers, the collection time, the ``/metrics`` blocks and the GPU readings;
2. :func:`apply` reads the host's :class:`fleet.models.SteadyLane` (one ``SELECT``). The lane
   is taken when its key equals the report's, the report is newer than the host's newest
   applied one, no report of the host awaits its derivation, and every server sent its
   metrics in the compact form alone (a text body, or a server without metrics, goes the
   long way);
3. the report row, the host's and servers' ``last_seen``, the servers' metric snapshots,
   one :class:`fleet.models.MetricSample` per server, the GPU readings and one
   :class:`fleet.models.GpuSample` per GPU are written by one statement. Before the lane's
   ``until`` the report is stored evaluated (nothing is due: the key says the configuration
   is the one evaluated, the lane's ``until`` that no metric rule is due); from ``until`` on,
   or while an earlier report of the host awaits its evaluation (a backlog), it is stored
   derived and queued for its evaluation alone, so a backlog never turns steady reports back
   into full derivations for the workers.

The worker arms the lane (:func:`arm`) after evaluating a host's newest report, and only
then: a report that changed anything goes the long way, is evaluated, and re-arms the lane
with its own key. A knowledge-base change closes every lane: ``audit.rulebook.requeue_fleet``
marks each host's newest report unevaluated again, and a host with such a report takes the
long way until the worker has evaluated it.

Why the result matches the long way: the key covers every field ``fleet.recording`` turns
into events, server and GPU columns or keep reasons, and every field the evaluation's
fingerprint reads, so a report with the lane's key would have derived to "same process,
nothing changed" and evaluated to "nothing due"; the sample is computed by the same
function (:func:`fleet.samples.sample_row`) from the same stored snapshot.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from django.conf import settings
from django.db import connection
from django.utils import timezone

from fleet import jsonread
from fleet.samples import COLUMNS, sample_row

#: Top-level report fields that differ on every report and change nothing derived.
_VOLATILE_REPORT = frozenset({"report_id", "collected_at"})
#: GPU readings stored as samples (``GpuSample``) and on the ``Gpu`` row; ECC and XID
#: counters are not here: a change of either must reach the evaluation.
_GPU_READINGS = ("memory_used_bytes", "utilization_gpu_pct", "temperature_c", "power_draw_w")


def steady_key(raw: dict[str, Any]) -> str:
    """sha256 (hex) of ``raw`` without :data:`_VOLATILE_REPORT`, the servers' ``metrics``
    blocks and the GPUs' :data:`_GPU_READINGS`; keys sorted, so field order does not count."""
    stripped = {k: v for k, v in raw.items() if k not in _VOLATILE_REPORT}
    servers = raw.get("servers")
    if isinstance(servers, list):
        stripped["servers"] = [{k: v for k, v in s.items() if k != "metrics"}
                               if isinstance(s, dict) else s for s in servers]
    gpus = raw.get("gpus")
    if isinstance(gpus, list):
        stripped["gpus"] = [{k: v for k, v in g.items() if k not in _GPU_READINGS}
                            if isinstance(g, dict) else g for g in gpus]
    text = json.dumps(stripped, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass
class Applied:
    """A report the lane stored: its row id and whether it was queued for its evaluation
    (``due``: a server's metric rules are due)."""

    id: int
    due: bool


_LANE_SQL = """
SELECT l.key, l.until, l.servers, l.gpus, h.last_collected_at, u.underived, u.waiting,
       (SELECT coalesce(json_agg(json_build_array(s.id, s.pid, s.started_at,
                                                  s.last_metrics_snapshot, s.last_metrics_at)),
                        '[]')
          FROM fleet_server s WHERE s.host_id = h.id AND s.is_running)
FROM fleet_steadylane l JOIN fleet_host h ON h.id = l.host_id
-- The host's reports awaiting evaluation, read once (the partial index holds only those):
-- is one of them not even derived, and is there any.
CROSS JOIN LATERAL (
  SELECT coalesce(bool_or(p.derived_at IS NULL), false) AS underived, count(*) > 0 AS waiting
    FROM fleet_report p WHERE p.host_id = h.id AND p.evaluated_at IS NULL) u
WHERE l.host_id = %s
"""

# One statement: the host row moves only if nobody moved it since the SELECT (``prev``), the
# report is inserted either way (``derived`` false when the host had moved: the worker then
# derives it), and everything else is written only for a report the lane inserted.
_WRITE_SQL = """
WITH h AS (
  UPDATE fleet_host SET last_seen = greatest(coalesce(last_seen, %(at)s), %(at)s),
                        last_collected_at = %(at)s
   WHERE id = %(host)s AND last_collected_at IS NOT DISTINCT FROM %(prev)s
  RETURNING id),
r AS (
  INSERT INTO fleet_report (host_id, report_id, schema_version, raw, received_at,
                            collected_at, derived_at, evaluated_at, evaluation_error,
                            evaluation_attempts, keep, keep_reason, steady_key)
  SELECT %(host)s, %(report_id)s, %(schema_version)s, %(raw)s::jsonb, %(now)s, %(at)s,
         CASE WHEN EXISTS (SELECT 1 FROM h) THEN %(now)s::timestamptz END,
         CASE WHEN EXISTS (SELECT 1 FROM h) AND NOT %(due)s THEN %(now)s::timestamptz END,
         '', 0, false, '', %(key)s
  ON CONFLICT (report_id) DO NOTHING
  RETURNING id, derived_at IS NOT NULL AS derived),
s AS (
  UPDATE fleet_server t SET last_seen = %(at)s, last_report_id = r.id,
                            last_metrics_snapshot = v.snapshot, last_metrics_at = v.metrics_at
    FROM r, jsonb_to_recordset(%(servers)s::jsonb)
            AS v(id bigint, snapshot jsonb, metrics_at timestamptz)
   WHERE r.derived AND t.id = v.id),
m AS (
  INSERT INTO fleet_metricsample (server_id, report_id, ts, window_kind, extra, {columns})
  SELECT v.server_id, r.id, v.ts, v.window_kind, v.extra, {v_columns}
    FROM r, jsonb_to_recordset(%(samples)s::jsonb)
            AS v(server_id bigint, ts timestamptz, window_kind text, extra jsonb, {typed})
   WHERE r.derived),
g AS (
  UPDATE fleet_gpu t SET memory_used_bytes = v.memory_used_bytes,
                         utilization_pct = v.utilization_pct, temperature_c = v.temperature_c,
                         power_draw_w = v.power_draw_w, last_seen = %(at)s
    FROM r, jsonb_to_recordset(%(gpus)s::jsonb) AS v({gpu_typed})
   WHERE r.derived AND t.id = v.id),
gs AS (
  INSERT INTO fleet_gpusample (gpu_id, ts, memory_used_bytes, utilization_pct, temperature_c,
                               power_draw_w)
  SELECT v.id, %(at)s, v.memory_used_bytes, v.utilization_pct, v.temperature_c, v.power_draw_w
    FROM r, jsonb_to_recordset(%(gpus)s::jsonb) AS v({gpu_typed})
   WHERE r.derived)
SELECT id, derived FROM r
""".format(  # noqa: S608 - column names are this module's constants, never input
    columns=", ".join(COLUMNS), v_columns=", ".join(f"v.{c}" for c in COLUMNS),
    typed=", ".join(f"{c} double precision" for c in COLUMNS),
    gpu_typed="id bigint, memory_used_bytes bigint, utilization_pct double precision, "
              "temperature_c double precision, power_draw_w double precision")


def supported() -> bool:
    """True on PostgreSQL (the statements use its JSON functions) unless the operator turned
    the lane off (``INGEST_STEADY_LANE``); the SQLite demo always takes the long way."""
    return settings.INGEST_STEADY_LANE and connection.vendor == "postgresql"


def apply(host_id: int, wire: Any, raw: dict[str, Any], key: str,
          identities: list[str], raw_text: str | None = None) -> Applied | None:
    """Store and apply the validated report ``wire`` (``raw``: its redacted JSON, ``key``:
    :func:`steady_key` of it, ``identities``: ``fleet.recording.server_identity`` of each of
    its servers, in order) through the lane, or return None having written nothing when
    the lane is not open for it (the caller then stores it for the worker). ``raw_text``:
    JSON text of ``raw`` when the caller has one (the body as received), stored instead of
    serialising ``raw`` again. Raises Django's database errors."""
    plan = _plan(host_id, wire, key, identities)
    if plan is None:
        return None
    prev, due, servers, samples, gpus = plan
    now = timezone.now()
    params = {"host": host_id, "at": wire.collected_at, "prev": prev, "now": now,
              "report_id": wire.report_id, "schema_version": wire.schema_version,
              "raw": _dumps(raw) if raw_text is None else raw_text, "due": due, "key": key,
              "servers": _dumps(servers), "samples": _dumps(samples), "gpus": _dumps(gpus)}
    row = _fetchone(_WRITE_SQL, params)
    if row is None:
        return None  # a duplicate report_id: the long way answers it as one
    report_pk, derived = row
    return Applied(report_pk, due or not derived)


def _plan(host_id: int, wire: Any, key: str,
          identities: list[str]) -> tuple[Any, bool, list, list, list] | None:
    """``(host's last_collected_at, metric rules due, server rows, samples, GPU readings)``
    for :data:`_WRITE_SQL`, or None when the lane is closed for this report."""
    if wire.failed_starts or not wire.servers:
        return None
    found = _fetchone(_LANE_SQL, [host_id])
    if found is None:
        return None
    lane_key, until, lane_servers, lane_gpus, last_collected, underived, waiting, running = found
    at = wire.collected_at
    if lane_key != key or underived or last_collected is None or at <= last_collected:
        return None
    slots = dict(_rows(lane_servers))
    if len(set(identities)) != len(identities) or set(identities) != set(slots):
        return None  # a slot reported twice, or a server stopped: the long way decides
    state = {row[0]: row for row in _rows(running)}
    servers, samples = [], []
    for info, identity in zip(wire.servers, identities, strict=True):
        scrape = info.metrics
        server_id = slots.get(identity)
        known = state.get(server_id)
        if scrape is None or scrape.text or scrape.compact is None or known is None:
            return None
        _, pid, started_at, snapshot, snapshot_at = known
        if pid != info.pid or _when(started_at) != info.started_at:
            return None  # the key says same process; the rows say otherwise: long way
        row, new_snapshot = sample_row(snapshot, _when(snapshot_at),
                                       {"text": "", "compact": scrape.compact.model_dump()},
                                       scrape.scraped_at)
        servers.append({"id": server_id, "snapshot": new_snapshot,
                        "metrics_at": scrape.scraped_at})
        samples.append({"server_id": server_id, **row})
    gpu_ids = dict(_rows(lane_gpus))
    if {info.uuid for info in wire.gpus} != set(gpu_ids):
        return None
    gpus = []
    for info in wire.gpus:
        gpu_id = gpu_ids.get(info.uuid)
        if gpu_id is None:
            return None
        gpus.append({"id": gpu_id, "memory_used_bytes": info.memory_used_bytes,
                     "utilization_pct": info.utilization_gpu_pct,
                     "temperature_c": info.temperature_c, "power_draw_w": info.power_draw_w})
    # Due: a metric rule or a finding refresh, or an earlier report of the host still
    # waiting for its evaluation (the worker evaluates a host's reports in order: this one
    # must not look evaluated before that one is).
    return last_collected, at >= until or waiting, servers, samples, gpus


def _fetchone(sql: str, params: Any) -> tuple | None:
    """The first row of ``sql`` with parameters bound by the server (a plain psycopg cursor:
    Django's quotes the report's JSON into the SQL text in Python), prepared on the
    connection at its first run, so PostgreSQL parses and plans the six-part write once per
    connection instead of on every report. Needs ``prepare_threshold`` set on the connection
    (``config.settings``: Django leaves it None, which turns preparing off even when asked).
    Raises Django's database errors."""
    import psycopg

    connection.ensure_connection()
    with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
        cursor.execute(sql, params, prepare=True)
        return cursor.fetchone()


def _rows(value: Any) -> list:
    return jsonread.loads(value.encode() if isinstance(value, str) else value)[0] \
        if isinstance(value, str | bytes) else (value or [])


def _when(value: Any) -> datetime | None:
    """A timestamp read back through ``json_build_array`` (ISO text) as an aware datetime."""
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(value)


def _dumps(value: Any) -> str:
    """JSON text of ``value`` (dicts, lists, numbers, strings, aware datetimes) for a
    ``jsonb`` parameter. orjson writes it several times faster than ``json`` (the snapshot
    and samples of every steady report); what orjson refuses (an integer past 64 bits, a
    non-string key) is written by ``json`` instead, datetimes as ISO 8601 either way."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return json.dumps(value, default=_iso)


def _iso(value: Any) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


_ARM_SQL = """
INSERT INTO fleet_steadylane (host_id, key, until, servers, gpus, armed_at)
SELECT r.host_id, r.steady_key, %(until)s,
       (SELECT coalesce(jsonb_agg(jsonb_build_array(s.identity, s.id)), '[]')
          FROM fleet_server s WHERE s.host_id = r.host_id AND s.is_running),
       (SELECT coalesce(jsonb_agg(jsonb_build_array(g.uuid, g.id)), '[]')
          FROM fleet_gpu g WHERE g.host_id = r.host_id AND g.is_present),
       %(now)s
  FROM fleet_report r JOIN fleet_host h ON h.id = r.host_id
 WHERE r.report_id = %(report_id)s AND r.steady_key <> '' AND r.derived_at IS NOT NULL
   AND r.evaluated_at IS NOT NULL AND h.last_collected_at = r.collected_at
   AND NOT EXISTS (SELECT 1 FROM fleet_report p WHERE p.host_id = r.host_id
                      AND p.evaluated_at IS NULL AND p.derived_at IS NULL)
   AND NOT EXISTS (SELECT 1 FROM fleet_server f
                    WHERE f.host_id = r.host_id AND f.failed_start IS NOT NULL)
ON CONFLICT (host_id) DO UPDATE SET key = EXCLUDED.key, until = EXCLUDED.until,
  servers = EXCLUDED.servers, gpus = EXCLUDED.gpus, armed_at = EXCLUDED.armed_at
"""


def arm(report_id: Any, until: datetime | None) -> bool:
    """Open the lane of the host of ``report_id`` for reports with the same key until
    ``until`` (None: close it). Opened only when that report is the host's newest, derived
    and evaluated, no report of the host awaits its derivation and no server of the host
    has a failed start; otherwise, if it is the host's newest, the lane is closed. Returns
    whether it is open."""
    with connection.cursor() as cursor:
        if until is not None:
            cursor.execute(_ARM_SQL, {"report_id": str(report_id), "until": until,
                                      "now": timezone.now()})
            if cursor.rowcount:
                return True
        # Only the host's newest report closes the lane: an older one evaluated late (a
        # backlog) leaves it to the newer reports queued behind it.
        cursor.execute(_DISARM_SQL, [str(report_id)])
    return False


_DISARM_SQL = """
DELETE FROM fleet_steadylane l USING fleet_report r JOIN fleet_host h ON h.id = r.host_id
 WHERE r.report_id = %s AND l.host_id = r.host_id AND h.last_collected_at <= r.collected_at
"""

