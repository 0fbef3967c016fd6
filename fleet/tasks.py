"""Periodic fleet maintenance (Celery beat): the evaluation sweep, retention and the
sample partitions.

The tasks are idempotent, so they may run twice (acks_late).
"""

from __future__ import annotations

import logging
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.db.models import Max, QuerySet
from django.db.models.functions import TruncHour
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerError

from fleet.models import GpuSample, MetricSample, Report, Server
from fleet.partitions import maintain
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
    GPU) per hour; unchanged raw reports go sooner (:func:`_drop_derived_raw`).
    Returns ``{"reports": n, "metric_samples": n, "gpu_samples": n}`` deleted.
    """
    cutoff = timezone.now() - timedelta(hours=settings.REPORT_RETENTION_HOURS)
    reports, _ = Report.objects.filter(received_at__lt=cutoff, keep=False).delete()
    reports += _drop_derived_raw()
    thin = timezone.now() - timedelta(hours=settings.SAMPLE_FULL_RESOLUTION_HOURS)
    return {"reports": reports,
            "metric_samples": _thin(MetricSample.objects.filter(ts__lt=thin), "server_id"),
            "gpu_samples": _thin(GpuSample.objects.filter(ts__lt=thin), "gpu_id")}


def _drop_derived_raw() -> int:
    """Delete raw reports already derived into samples and evaluated, older than
    ``REPORT_RAW_RETENTION_MINUTES``, unless kept (something changed: version, flags, env,
    template, GPUs, models), the newest of a server (``Server.last_report``) or the start of
    a metric window (``ServerAuditState.metrics_baseline``). Returns the count (most
    reports repeat the previous one; their numbers live on in the samples)."""
    from django.apps import apps

    cutoff = timezone.now() - timedelta(minutes=settings.REPORT_RAW_RETENTION_MINUTES)
    newest = Server.objects.exclude(last_report=None).values("last_report_id")
    doomed = (Report.objects.filter(received_at__lt=cutoff, keep=False,
                                    derived_at__isnull=False, evaluated_at__isnull=False)
              .exclude(pk__in=newest))
    if apps.is_installed("audit"):  # the audit app is above fleet: look it up, not import it
        state = apps.get_model("audit", "ServerAuditState")
        doomed = doomed.exclude(pk__in=state.objects.exclude(metrics_baseline=None)
                                .values("metrics_baseline_id"))
    deleted, _ = Report.objects.filter(pk__in=list(doomed.values_list("pk", flat=True)
                                                   [:RAW_PRUNE_BATCH])).delete()
    return deleted


@shared_task(acks_late=True, ignore_result=True)
def maintain_sample_partitions() -> dict[str, dict[str, int]]:
    """Create the coming days' sample partitions and drop those past
    ``SAMPLE_RETENTION_DAYS`` (row deletes where the tables are not partitioned).
    Returns :func:`fleet.partitions.maintain`'s counts per table."""
    return maintain(timezone.now(), settings.SAMPLE_RETENTION_DAYS)


#: Raw reports deleted per prune run (every run is a few seconds of work at most; the
#: hourly beat catches up over the next runs).
RAW_PRUNE_BATCH = 50_000


def _thin(old: QuerySet, owner: str) -> int:
    keep = (old.annotate(hour=TruncHour("ts")).values(owner, "hour")
            .annotate(newest=Max("id")).values("newest"))
    deleted, _ = old.exclude(id__in=keep).delete()
    return deleted
