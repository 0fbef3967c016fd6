"""Celery tasks of the audit app. Tasks take ids only and exit quietly when the row is gone.

``evaluate_report`` is safe to run twice: :func:`audit.evaluation.evaluate_report`
claims the report row under a lock and does all its writes in one transaction,
so a redelivery after a worker crash (``acks_late``) starts from scratch and a
second delivery of a finished report is a no-op.
"""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings
from django.db import InterfaceError, OperationalError

from audit import evaluation
from audit.lane import arm_lane
from audit.rulebook import requeue_fleet, sync_rules
from audit.signals import findings_evaluated
from fleet.models import Report
from fleet.recording import derive_report

log = logging.getLogger(__name__)


@shared_task(acks_late=True, ignore_result=True,
             autoretry_for=(OperationalError, InterfaceError), retry_backoff=5,
             retry_backoff_max=120, retry_jitter=True, max_retries=5)
def evaluate_report(report_id: str) -> bool:
    """Derive (:func:`fleet.recording.derive_report`) then evaluate the stored report with
    ``report_id`` (a UUID string); each step is its own transaction and runs once.

    Returns True when this call evaluated the report, False when the row is gone,
    already evaluated, or being evaluated by another worker. Database outages
    (the only transient error here) are retried with capped, jittered backoff.
    """
    try:
        derive_report(report_id)  # the raw report becomes servers, GPUs, samples first
        outcomes = evaluation.evaluate_report(report_id)
    except (OperationalError, InterfaceError):
        raise  # transient: autoretry
    except Exception as exc:  # noqa: BLE001 - a poisoned report: recorded, retried a few times
        gave_up = evaluation.record_failure(report_id, exc)
        log.exception("evaluation of report %s failed%s", report_id,
                      "; given up" if gave_up else "; the sweep retries it")
        return False
    if outcomes is None:
        log.info("report %s already evaluated, claimed elsewhere or gone", report_id)
        return False
    try:
        arm_lane(report_id)
    except (OperationalError, InterfaceError):
        log.warning("steady lane of report %s not armed (database)", report_id)
    for outcome in outcomes:
        if outcome.opened or outcome.resolved or outcome.failures:
            log.info("report %s server %s: opened %s resolved %s failed %s", report_id,
                     outcome.server_id, outcome.opened, outcome.resolved, outcome.failures)
    # Consumers of finding events (the alerts outbox, advice's stored plans) listen; audit
    # imports none of them.
    findings_evaluated.send(sender=evaluate_report, report_id=str(report_id),
                            config_evaluated=[o.server_id for o in outcomes
                                              if "config" in o.cadences])
    return True


def queue_evaluation(sender: object = None, report_id: str = "", host_id: int | None = None,
                     **kwargs: object) -> None:
    """Receiver of :data:`fleet.signals.report_needs_evaluation`: queue the evaluation task
    (a broker error propagates to the sender, which leaves the report for the sweep).
    With ``EVALUATE_SHARDS`` > 1 it goes to the host's shard (:func:`evaluation_queue`)."""
    if settings.EVALUATE_SHARDS <= 1:
        evaluate_report.delay(report_id)
        return
    if host_id is None:  # a sender that did not say: one lookup
        host_id = Report.objects.filter(report_id=report_id).values_list(
            "host_id", flat=True).first() or 0
    evaluate_report.apply_async((report_id,), queue=evaluation_queue(host_id))


def evaluation_queue(host_id: int) -> str:
    """The evaluation queue of ``host_id``: ``evaluate`` unsharded, else
    ``evaluate.<host_id mod EVALUATE_SHARDS>``. Every report of one host lands on the same
    shard, so the one worker consuming it applies them in the order they were stored."""
    shards = settings.EVALUATE_SHARDS
    return "evaluate" if shards <= 1 else f"evaluate.{host_id % shards}"


@shared_task(acks_late=True, ignore_result=True)
def check_knowledge_base() -> int:
    """Mirror the rule files into the database; on a new knowledge-base version queue
    every host's latest report for re-evaluation. Returns how many were queued."""
    version, is_new = sync_rules()
    return requeue_fleet(version) if is_new else 0


@shared_task(acks_late=True, ignore_result=True)
def check_kb_freshness() -> int:
    """Alert once per reason the active knowledge base is stale for the fleet (older than
    AUDIT_KB_MAX_AGE_DAYS, or a running vLLM newer than its verified_through). Returns the
    deliveries created."""
    from audit.kb_status import alert_if_stale

    return alert_if_stale()


@shared_task(acks_late=True, ignore_result=True, time_limit=600, soft_time_limit=540)
def watch_upstream() -> dict[str, int]:
    """Re-read the GitHub issues/PRs the rules cite; alert once per close/merge that happened
    after a citing rule's last_verified (opt-in: beat schedules it only when
    AUDIT_UPSTREAM_WATCH is true). Returns counters of the run."""
    from audit.upstream import run_watch

    return run_watch().as_dict()

