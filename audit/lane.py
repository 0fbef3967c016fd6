"""Arm the steady lane (``fleet.lane``) of a host after its newest report was evaluated.

The lane stays open until the earliest of: a server's metric rules being due
(:func:`audit.cadence.next_due` of its ``metrics_evaluated_at``) and the refresh of the host's still
firing findings (``collected_at + AUDIT_FINDING_SEEN_REFRESH_S``, see ``audit.steady``): the
worker sees every host at least that often, as before the lane.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import connection

from audit import cadence
from fleet import lane

_UNTIL_SQL = """
SELECT r.collected_at, min(a.metrics_evaluated_at), r.host_id,
       bool_and(a.metrics_evaluated_at IS NOT NULL AND a.config_fingerprint <> '')
  FROM fleet_report r
  JOIN fleet_server s ON s.host_id = r.host_id AND s.is_running
  LEFT JOIN audit_serverauditstate a ON a.server_id = s.id
 WHERE r.report_id = %s
 GROUP BY r.collected_at, r.host_id
"""


def arm_lane(report_id: Any) -> bool:
    """Open (or close) the steady lane of the host of the evaluated report ``report_id``;
    True when it is open. PostgreSQL only (False elsewhere, writing nothing)."""
    if not lane.supported():
        return False
    with connection.cursor() as cursor:
        cursor.execute(_UNTIL_SQL, [str(report_id)])
        row = cursor.fetchone()
    until = None
    if row is not None and row[3]:  # every running server evaluated, metric rules included
        collected_at, metrics_at, host_id, _ = row
        until = min(cadence.next_due(metrics_at, host_id, settings.AUDIT_METRICS_INTERVAL_S),
                    collected_at + timedelta(seconds=settings.AUDIT_FINDING_SEEN_REFRESH_S))
    return lane.arm(report_id, until)
