"""Metric samples from consecutive scrapes, retention pruning and the evaluation sweep."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from fleet.models import GpuSample, MetricSample, Report
from fleet.tasks import prune_reports, sweep_unevaluated

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def stamp(seconds: int) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def exposition(generation_tokens: int, running: int) -> str:
    return (
        "# TYPE vllm:generation_tokens counter\n"
        f'vllm:generation_tokens_total{{engine="0",model_name="m"}} {generation_tokens}\n'
        "# TYPE vllm:num_requests_running gauge\n"
        f'vllm:num_requests_running{{engine="0",model_name="m"}} {running}\n')


def scrape(seconds: int, tokens: int, running: int = 4, **server) -> dict:
    metrics = {"format": "prometheus-text", "scraped_at": stamp(seconds),
               "text": exposition(tokens, running)}
    return {"metrics": metrics, **server}


def test_consecutive_scrapes_of_one_process_give_per_interval_rates(post_report, make_report,
                                                                    enrolled):
    _, token = enrolled()
    post_report(make_report(collected_at=stamp(0), server=scrape(0, 1000)), token=token)
    post_report(make_report(collected_at=stamp(30), server=scrape(30, 4000, 7)), token=token)
    first, second = MetricSample.objects.order_by("ts")
    assert first.window_kind == "lifetime" and first.generation_tps is None
    assert second.window_kind == "delta"
    assert second.generation_tps == pytest.approx(3000 / 30)
    assert second.requests_running == 7
    assert second.window_s == pytest.approx(30)


def test_after_a_restart_the_window_starts_from_the_new_process(post_report, make_report,
                                                                enrolled):
    _, token = enrolled()
    post_report(make_report(collected_at=stamp(0), server=scrape(0, 1000)), token=token)
    post_report(make_report(collected_at=stamp(30), server=scrape(
        30, 200, pid=777, started_at=stamp(20))), token=token)
    newest = MetricSample.objects.order_by("ts").last()
    assert newest.window_kind == "lifetime"
    assert newest.generation_tps is None  # never a negative rate across the restart


def test_pruning_drops_old_unkept_reports_only(post_report, make_report, enrolled):
    _, token = enrolled()
    for minute in range(3):
        post_report(make_report(collected_at=stamp(minute * 60)), token=token)
    baseline, old, recent = Report.objects.order_by("collected_at")
    assert baseline.keep and not old.keep
    past = timezone.now() - timedelta(hours=settings.REPORT_RETENTION_HOURS + 1)
    Report.objects.filter(pk__in=[baseline.pk, old.pk]).update(received_at=past)
    assert prune_reports()["reports"] == 1
    assert set(Report.objects.values_list("pk", flat=True)) == {baseline.pk, recent.pk}


def test_unchanged_reports_go_once_derived_and_evaluated_but_their_samples_stay(
        post_report, make_report, enrolled):
    from fleet.models import Server

    _, token = enrolled()
    for i in range(4):
        post_report(make_report(collected_at=stamp(i * 60), server=scrape(i * 60, 1000 + i)),
                    token=token)
    first, second, third, newest = Report.objects.order_by("collected_at")
    Report.objects.update(evaluated_at=timezone.now())  # the worker's second step
    past = timezone.now() - timedelta(minutes=settings.REPORT_RAW_RETENTION_MINUTES + 1)
    Report.objects.exclude(pk=third.pk).update(received_at=past)
    MetricSample.objects.update(ts=timezone.now())  # inside the full-resolution window
    GpuSample.objects.update(ts=timezone.now())
    assert prune_reports()["reports"] == 1  # the second: unchanged, derived, evaluated, old
    # first: the first report (kept); third: too young; newest: the server's latest
    assert set(Report.objects.values_list("pk", flat=True)) == {first.pk, third.pk, newest.pk}
    assert Server.objects.get().last_report_id == newest.pk
    assert MetricSample.objects.count() == 4 and GpuSample.objects.count() == 4


def test_pruning_thins_old_samples_to_one_per_hour(post_report, make_report, enrolled):
    _, token = enrolled()
    for i in range(4):
        post_report(make_report(collected_at=stamp(i * 60), server=scrape(i * 60, 1000 + i)),
                    token=token)
    assert MetricSample.objects.count() == 4 and GpuSample.objects.count() == 4
    # Aligned to the hour: four samples a minute apart must fall in one hourly bucket.
    old = (timezone.now() - timedelta(days=30)).replace(minute=0, second=0, microsecond=0)
    for i, sample in enumerate(MetricSample.objects.order_by("ts")):
        MetricSample.objects.filter(pk=sample.pk).update(ts=old + timedelta(minutes=i))
    GpuSample.objects.update(ts=old)
    result = prune_reports()
    assert result["metric_samples"] == 3 and result["gpu_samples"] == 3
    assert MetricSample.objects.count() == 1 and GpuSample.objects.count() == 1


def test_the_sweep_queues_reports_left_unevaluated_on_the_evaluate_queue(
        post_report, make_report, enrolled):
    import redis

    queue = redis.Redis.from_url(settings.REDIS_URL)
    queue.flushdb()
    _, token = enrolled()
    post_report(make_report(), token=token)
    assert sweep_unevaluated() == 0  # too young: its own on-commit enqueue is in flight
    Report.objects.update(received_at=timezone.now() - timedelta(minutes=10))
    assert sweep_unevaluated() == 1
    assert queue.llen("evaluate") == 1
