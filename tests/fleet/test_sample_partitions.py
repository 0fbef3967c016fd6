"""Metric and GPU samples in daily partitions on PostgreSQL: where rows land,
retention dropping whole days, ingest dated outside the precreated days, and the migration
keeping an existing database's samples."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from fleet.models import GpuSample, MetricSample
from fleet.partitions import ensure_partitions, partition_name
from fleet.tasks import maintain_sample_partitions

BEFORE = ("fleet", "0011_probes_probe_policy")


def iso(ts: datetime) -> str:
    return ts.astimezone(UTC).isoformat().replace("+00:00", "Z")


def metrics_at(ts: datetime) -> dict:
    return {"metrics": {"format": "prometheus-text", "scraped_at": iso(ts),
                        "text": "# TYPE vllm:num_requests_running gauge\n"
                                'vllm:num_requests_running{engine="0",model_name="m"} 3\n'}}


def partition_of(model, pk: int) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT tableoid::regclass::text FROM {model._meta.db_table} "  # noqa: S608
                       "WHERE id = %s", [pk])
        return cursor.fetchone()[0]


def table_exists(name: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [name])
        return cursor.fetchone()[0]


def report_at(post_report, make_report, token, ts: datetime) -> None:
    response = post_report(make_report(collected_at=iso(ts), server=metrics_at(ts)), token=token)
    assert response.status_code == 202


@pytest.mark.django_db
def test_samples_land_in_the_partition_of_their_day(post_report, make_report, enrolled):
    _, token = enrolled()
    now = timezone.now()
    report_at(post_report, make_report, token, now)
    sample, gpu_sample = MetricSample.objects.get(), GpuSample.objects.get()
    assert partition_of(MetricSample, sample.pk) == partition_name("fleet_metricsample",
                                                                    now.date())
    assert partition_of(GpuSample, gpu_sample.pk) == partition_name("fleet_gpusample",
                                                                    now.date())


@pytest.mark.django_db
def test_a_report_dated_before_the_precreated_days_is_stored_and_later_gets_its_partition(
        post_report, make_report, enrolled):
    _, token = enrolled()
    old = timezone.now() - timedelta(days=10)
    assert not table_exists(partition_name("fleet_metricsample", old.date()))
    report_at(post_report, make_report, token, old)
    sample = MetricSample.objects.get()
    assert sample.ts == old
    assert partition_of(MetricSample, sample.pk) == "fleet_metricsample_default"

    counts = maintain_sample_partitions()

    assert counts["fleet_metricsample"]["created"] >= 1
    assert partition_of(MetricSample, sample.pk) == partition_name("fleet_metricsample",
                                                                    old.date())
    assert partition_of(GpuSample, GpuSample.objects.get().pk) == partition_name(
        "fleet_gpusample", old.date())


@pytest.mark.django_db
def test_retention_drops_whole_old_days_and_keeps_the_recent_ones(post_report, make_report,
                                                                  enrolled):
    _, token = enrolled()
    now = timezone.now()
    expired = now - timedelta(days=settings.SAMPLE_RETENTION_DAYS + 2)
    kept = now - timedelta(days=settings.SAMPLE_RETENTION_DAYS - 2)
    for table in ("fleet_metricsample", "fleet_gpusample"):
        ensure_partitions(table, [expired.date(), kept.date()])
    for ts in (expired, kept, now):
        report_at(post_report, make_report, token, ts)
    assert partition_of(MetricSample, MetricSample.objects.get(ts__lt=kept).pk) == \
        partition_name("fleet_metricsample", expired.date())

    connection.check_constraints()  # the task commits; here, fire the deferred FK checks
    counts = maintain_sample_partitions()

    assert counts["fleet_metricsample"]["dropped"] == 1
    assert counts["fleet_gpusample"]["dropped"] == 1
    assert not table_exists(partition_name("fleet_metricsample", expired.date()))
    assert not table_exists(partition_name("fleet_gpusample", expired.date()))
    assert table_exists(partition_name("fleet_metricsample", kept.date()))
    assert sorted(MetricSample.objects.values_list("ts", flat=True)) == [kept, now]
    assert sorted(GpuSample.objects.values_list("ts", flat=True)) == [kept, now]


@pytest.mark.django_db
def test_rows_past_retention_in_the_default_partition_are_deleted(post_report, make_report,
                                                                  enrolled):
    _, token = enrolled()
    ancient = timezone.now() - timedelta(days=settings.SAMPLE_RETENTION_DAYS + 30)
    report_at(post_report, make_report, token, ancient)
    assert MetricSample.objects.count() == 1
    counts = maintain_sample_partitions()
    assert counts["fleet_metricsample"]["deleted"] == 1
    assert not MetricSample.objects.exists() and not GpuSample.objects.exists()
    assert not table_exists(partition_name("fleet_metricsample", ancient.date()))


def _migrate(target: tuple[str, str] | None) -> None:
    executor = MigrationExecutor(connection)
    nodes = [target] if target else executor.loader.graph.leaf_nodes()
    executor.migrate(nodes)


def _is_partitioned(table: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT relkind FROM pg_class WHERE oid = to_regclass(%s)", [table])
        return cursor.fetchone()[0] == "p"


@pytest.mark.django_db(transaction=True)
def test_the_migration_keeps_existing_samples_and_their_ids():
    """Samples written at the previous migration state (plain tables) survive partitioning
    with their ids, land in their days' partitions, and new ids continue after them; the
    reverse migration gives plain tables with the same rows."""
    _migrate(BEFORE)
    assert not _is_partitioned("fleet_metricsample")
    # The rows are written with the models of that state (later migrations add columns
    # elsewhere in fleet that its tables do not have).
    old = MigrationExecutor(connection).loader.project_state(BEFORE).apps
    host = old.get_model("fleet", "Host").objects.create(machine_id="machine-1",
                                                         hostname="gpu-node-1")
    server = old.get_model("fleet", "Server").objects.create(host=host, identity="port:8000",
                                                             pid=1)
    gpu = old.get_model("fleet", "Gpu").objects.create(host=host, uuid="GPU-1", index=0,
                                                       name="NVIDIA H100")
    now = timezone.now()
    stamps = [now - timedelta(days=settings.SAMPLE_RETENTION_DAYS + 5),
              now - timedelta(days=3), now]
    for ts in stamps:
        old.get_model("fleet", "MetricSample").objects.create(server=server, ts=ts)
        old.get_model("fleet", "GpuSample").objects.create(gpu=gpu, ts=ts)
    before = {m: sorted(m.objects.values_list("id", "ts")) for m in (MetricSample, GpuSample)}
    assert len(before[MetricSample]) == 3 and len(before[GpuSample]) == 3

    _migrate(None)

    assert _is_partitioned("fleet_metricsample") and _is_partitioned("fleet_gpusample")
    for model, rows in before.items():
        assert sorted(model.objects.values_list("id", "ts")) == rows
        too_old, three_days, today = (pk for pk, _ in sorted(rows, key=lambda r: r[1]))
        table = model._meta.db_table
        assert partition_of(model, three_days) == partition_name(table, stamps[1].date())
        assert partition_of(model, too_old) == f"{table}_default"
        assert partition_of(model, today) == partition_name(table, now.date())
    newest = GpuSample.objects.create(gpu=GpuSample.objects.get(id=today).gpu, ts=now)
    assert newest.id > max(pk for pk, _ in before[GpuSample])

    _migrate(BEFORE)
    assert not _is_partitioned("fleet_metricsample")
    assert sorted(MetricSample.objects.values_list("id", "ts")) == before[MetricSample]
    _migrate(None)
    assert GpuSample.objects.count() == 4
