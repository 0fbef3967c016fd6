"""Raw-report pruning at fleet scale: one statement per batch (``fleet.pruning``) deletes what
Django's collector deleted, nulls the same references, works off a backlog in one run and
never waits on a report the ingest holds."""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from fleet import pruning, tasks
from fleet.models import ChangeEvent, MetricSample, Report, Server
from fleet.recording import derive_report

pytestmark = pytest.mark.django_db
SCRAPE = ("# TYPE vllm:generation_tokens counter\n"
          'vllm:generation_tokens_total{{engine="0",model_name="m"}} {tokens}\n')


def post_fleet(post_report, make_report, enrolled, hosts: int = 2, reports: int = 5) -> None:
    """``hosts`` hosts with ``reports`` reports each, derived, evaluated, received long enough
    ago to be pruned, each with its metric sample; a change event points at the second."""
    start = timezone.now() - timedelta(hours=1)
    for h in range(hosts):
        _, token = enrolled(machine_id=f"m-{h}", hostname=f"node-{h}")
        for i in range(reports):
            at = (start + timedelta(seconds=30 * i)).isoformat()
            metrics = {"format": "prometheus-text", "scraped_at": at,
                       "text": SCRAPE.format(tokens=1000 + i)}
            body = make_report(collected_at=at, server={"metrics": metrics},
                               host={"machine_id": f"m-{h}", "hostname": f"node-{h}"})
            assert post_report(body, token=token).status_code == 202
    for report_id in Report.objects.filter(derived_at=None).order_by("collected_at") \
            .values_list("report_id", flat=True):  # a transactional test has no worker
        derive_report(report_id)
    past = timezone.now() - timedelta(minutes=settings.REPORT_RAW_RETENTION_MINUTES + 1)
    Report.objects.update(evaluated_at=timezone.now(), received_at=past)
    second = Report.objects.filter(keep=False).order_by("collected_at").first()
    ChangeEvent.objects.create(host=second.host, report=second, kind="flags_changed",
                               at=second.collected_at, new_value="planted")


def state() -> dict[str, object]:
    """What a user would see of the raw reports and what points at them."""
    return {
        "reports": sorted(Report.objects.values_list("report_id", flat=True)),
        "samples": MetricSample.objects.count(),
        "samples_with_report": sorted(MetricSample.objects.exclude(report=None)
                                      .values_list("report_id", flat=True)),
        "planted_event_report": ChangeEvent.objects.get(new_value="planted").report_id,
        "newest": sorted(Server.objects.values_list("last_report__report_id", flat=True)),
    }


class Rollback(Exception):
    pass


def test_the_statement_deletes_what_the_collector_deleted(post_report, make_report, enrolled):
    assert connection.vendor == "postgresql", "the suite runs on PostgreSQL (README)"
    post_fleet(post_report, make_report, enrolled)
    before = state()
    cutoff = timezone.now() - timedelta(minutes=settings.REPORT_RAW_RETENTION_MINUTES)
    seen = {}
    for way in ("collector", "statement"):
        try:
            with transaction.atomic():
                delete = pruning._delete_with_collector if way == "collector" \
                    else pruning.delete_reports
                deleted = delete(cutoff, True, 1000)
                with connection.cursor() as cursor:  # a dangling reference fails here
                    cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
                seen[way] = (deleted, state())
                raise Rollback
        except Rollback:
            pass
    assert state() == before
    assert seen["statement"] == seen["collector"]
    deleted, after = seen["statement"]
    # Of 5 reports per host: the first (kept: a first sighting) and the newest stay.
    assert deleted == 6 and len(after["reports"]) == 4
    assert after["samples"] == before["samples"] == 10  # the numbers live on
    assert len(after["samples_with_report"]) == 4  # those of the reports that stayed
    assert before["planted_event_report"] is not None
    assert after["planted_event_report"] is None  # its report went: the reference is NULL
    assert after["newest"] == before["newest"]


def test_the_retention_limit_deletes_even_a_servers_newest(post_report, make_report, enrolled):
    post_fleet(post_report, make_report, enrolled, hosts=1, reports=3)
    Report.objects.filter(keep=False).update(
        received_at=timezone.now() - timedelta(hours=settings.REPORT_RETENTION_HOURS + 1))
    assert tasks.prune_reports()["reports"] == 2
    assert list(Report.objects.values_list("keep", flat=True)) == [True]
    assert Server.objects.get().last_report is None


def test_one_run_works_off_a_backlog_larger_than_a_batch(post_report, make_report, enrolled,
                                                          monkeypatch):
    post_fleet(post_report, make_report, enrolled, hosts=2, reports=6)
    monkeypatch.setattr(tasks, "RAW_PRUNE_BATCH", 3)
    assert tasks.prune_derived_raw() == 8  # 2 x (6 - kept first - newest), 3 batches
    assert tasks.prune_derived_raw() == 0


@pytest.mark.django_db(transaction=True)
def test_a_report_the_ingest_holds_is_skipped_not_waited_for(post_report, make_report,
                                                              enrolled):
    post_fleet(post_report, make_report, enrolled, hosts=1, reports=4)
    held = Report.objects.filter(keep=False).order_by("collected_at").first()
    params = connection.get_connection_params()
    with psycopg.connect(**{k: v for k, v in params.items() if k != "cursor_factory"}) as other:
        other.execute("SELECT 1 FROM fleet_report WHERE id = %s FOR UPDATE", [held.pk])
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '5s'")  # a wait would fail the test, not hang it
        assert tasks.prune_derived_raw() == 1  # of the two doomed, the one not held
        other.rollback()
    assert Report.objects.filter(pk=held.pk).exists()
    assert tasks.prune_derived_raw() == 1
