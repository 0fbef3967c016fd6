"""Periodic fleet maintenance (Celery beat): the evaluation sweep, retention and the
sample partitions.

The tasks are idempotent, so they may run twice (acks_late).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from celery import shared_task
from django.conf import settings
from django.db.models import Max, QuerySet
from django.db.models.functions import TruncHour
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerError

from fleet.models import GpuSample, MetricSample, Report
from fleet.partitions import maintain
from fleet.pruning import delete_reports
from fleet.signals import report_needs_evaluation

log = logging.getLogger(__name__)

#: Reports younger than this are left to their own on-commit enqueue. With beat every
#: 60 s, a report stored while the broker was down is evaluated within two minutes.
SWEEP_GRACE = timedelta(seconds=60)
SWEEP_BATCH = 500


@shared_task(acks_late=True, ignore_result=True)
def sweep_unevaluated() -> int:
    """Enqueue evaluation of reports left unevaluated (broker was down). Returns the count."""
    cutoff = timezone.now() - SWEEP_GRACE
    ids = list(Report.objects.filter(evaluated_at=None, received_at__lt=cutoff)
               .order_by("received_at").values_list("report_id", "host_id")[:SWEEP_BATCH])
    queued = 0
    for report_id, host_id in ids:
        try:
            report_needs_evaluation.send(sender=Report, report_id=str(report_id),
                                         host_id=host_id)
        except BrokerError as exc:
            log.warning("broker still unavailable after %d reports: %s", queued, exc)
            break
        queued += 1
    return queued


@shared_task(acks_late=True, ignore_result=True)
def prune_reports() -> dict[str, int]:
    """Delete raw reports past ``REPORT_RETENTION_HOURS`` unless kept; thin old samples.

    Samples older than ``SAMPLE_FULL_RESOLUTION_HOURS`` keep the newest one per server (or
    GPU) per hour; unchanged raw reports go sooner (:func:`prune_derived_raw`, which also
    runs on its own, every few minutes).
    Returns ``{"reports": n, "metric_samples": n, "gpu_samples": n}`` deleted.
    """
    cutoff = timezone.now() - timedelta(hours=settings.REPORT_RETENTION_HOURS)
    reports = _in_batches(cutoff, derived_only=False) + prune_derived_raw()
    thin = timezone.now() - timedelta(hours=settings.SAMPLE_FULL_RESOLUTION_HOURS)
    return {"reports": reports,
            "metric_samples": _thin(MetricSample.objects.filter(ts__lt=thin), "server_id"),
            "gpu_samples": _thin(GpuSample.objects.filter(ts__lt=thin), "gpu_id")}


@shared_task(acks_late=True, ignore_result=True)
def prune_derived_raw() -> int:
    """Delete raw reports already derived into samples and evaluated, older than
    ``REPORT_RAW_RETENTION_MINUTES``, unless kept (something changed: version, flags, env,
    template, GPUs, models), the newest of a server (``Server.last_report``) or the start of
    a metric window (``ServerAuditState.metrics_baseline``). Returns the count (most
    reports repeat the previous one; their numbers live on in the samples).

    A 10,000-host fleet at 30 s makes 333 such reports a second, 100,000 between two runs
    of the beat schedule (every 300 s): a run deletes in batches until none is left.
    """
    cutoff = timezone.now() - timedelta(minutes=settings.REPORT_RAW_RETENTION_MINUTES)
    return _in_batches(cutoff, derived_only=True)


#: Raw reports deleted per statement (:func:`fleet.pruning.delete_reports`): each batch is
#: its own short transaction, so the rows it locks are released within a second or so.
RAW_PRUNE_BATCH = 5_000
#: Batches per run at most (1,000,000 reports, three times a 10,000-host fleet's output
#: between two runs): a backlog is worked off over the next runs.
RAW_PRUNE_MAX_BATCHES = 200


def _in_batches(cutoff: datetime, derived_only: bool) -> int:
    """:func:`fleet.pruning.delete_reports` until a batch comes back short; the total."""
    total = 0
    for _ in range(RAW_PRUNE_MAX_BATCHES):
        deleted = delete_reports(cutoff, derived_only, RAW_PRUNE_BATCH)
        total += deleted
        if deleted < RAW_PRUNE_BATCH:
            break
    return total


@shared_task(acks_late=True, ignore_result=True)
def maintain_sample_partitions() -> dict[str, dict[str, int]]:
    """Create the coming days' sample partitions and drop those past
    ``SAMPLE_RETENTION_DAYS`` (row deletes where the tables are not partitioned).
    Returns :func:`fleet.partitions.maintain`'s counts per table."""
    return maintain(timezone.now(), settings.SAMPLE_RETENTION_DAYS)


def _thin(old: QuerySet, owner: str) -> int:
    keep = (old.annotate(hour=TruncHour("ts")).values(owner, "hour")
            .annotate(newest=Max("id")).values("newest"))
    deleted, _ = old.exclude(id__in=keep).delete()
    return deleted
