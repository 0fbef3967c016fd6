"""Celery tasks of the advice app.

``store_server_plans`` stores the upgrade plans of servers whose configuration was just
evaluated (:func:`advice.plans.store_plans`). It runs as its own task, queued by the
``findings_evaluated`` receiver, so a report's findings (and alerts) never wait for its plans:
a new configuration costs ~100 ms of planning (13 releases, BENCHMARKS.md), and a knowledge
base update re-plans the whole fleet at once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from celery import shared_task

from advice.plans import store_plans

log = logging.getLogger(__name__)


def on_findings_evaluated(sender: object = None, report_id: str = "",
                          config_evaluated: Iterable[int] = (), **kwargs: object) -> None:
    """Receiver of :data:`audit.signals.findings_evaluated`: queue the planning of the servers
    whose configuration was evaluated. A failure to queue is logged, never raised: the
    evaluation is committed, and the pages plan a server whose rows are missing themselves."""
    server_ids = list(config_evaluated)
    if not report_id or not server_ids:
        return
    try:
        store_server_plans.delay(report_id, server_ids)
    except Exception:  # noqa: BLE001 - the pages fall back to planning on the visit
        log.exception("queueing the upgrade plans of report %s failed", report_id)


@shared_task(acks_late=True, ignore_result=True)
def store_server_plans(report_id: str, server_ids: list[int]) -> int:
    """Plan ``server_ids`` from their entries in report ``report_id``; returns how many
    configurations were evaluated. Idempotent (a server's rows are replaced whole), so a
    redelivery after a worker loss only repeats the work."""
    return store_plans(report_id, server_ids)
