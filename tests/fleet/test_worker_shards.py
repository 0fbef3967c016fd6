"""Two worker processes on separate host shards of the evaluation queue (docs/scaling.md):
every report is derived and evaluated exactly once, by the worker of its host's shard or by the
steady lane in the request, and a host's reports are applied in the order they were collected
(none is mistaken for a late replay, so each leaves its metric sample)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.db.models import F

from audit.tasks import evaluation_queue
from fleet.models import MetricSample, Report
from fleet_agent.metrics_compact import compact
from tests.conftest import iso
from tests.fleet.compact_growth import grown
from tests.fleet.test_worker_e2e import ROOT, _database_url, _wait_for

SHARDS = 2
HOSTS = 4
REPORTS_PER_HOST = 4
CAPTURE = (ROOT / "demo" / "data" / "cases" / "metrics"
           / "vllm-benchmarking-fixture_v0.25.1_opt-125m-tp2-loaded.prom")


@pytest.fixture
def shard_workers(transactional_db: None, settings) -> Iterator[list[Path]]:
    """One ``celery worker -Q evaluate.<n>`` process per shard; their log files."""
    if not django_settings.REDIS_URL:
        pytest.fail("the shard test needs REDIS_URL (run `make test`)")
    import redis

    redis.Redis.from_url(django_settings.REDIS_URL).flushdb()
    settings.EVALUATE_SHARDS = SHARDS  # this process enqueues to the shards
    env = {**os.environ, "DATABASE_URL": _database_url(), "REDIS_URL": django_settings.REDIS_URL,
           "SECRET_KEY": "worker-test", "DEBUG": "false", "EVALUATE_SHARDS": str(SHARDS)}
    workers, logs = [], []
    try:
        for shard in range(SHARDS):
            log = Path(tempfile.mkstemp(suffix=f"-shard{shard}.log")[1])
            logs.append(log)
            with log.open("w") as out:
                workers.append(subprocess.Popen(
                    [sys.executable, "-m", "celery", "-A", "config", "worker",
                     "-Q", f"evaluate.{shard}", "--pool", "solo", "--without-gossip",
                     "--without-mingle", "--without-heartbeat", "--loglevel", "INFO",
                     "-n", f"shard{shard}-{os.getpid()}@%h"],
                    cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT))
        for worker, log in zip(workers, logs, strict=True):
            ready = _wait_for(lambda w=worker, p=log: "ready." in p.read_text()
                              or w.poll() is not None, 120)
            if not ready or worker.poll() is not None:
                pytest.fail(f"worker not ready: {log.read_text()[-3000:]}")
        yield logs
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            try:
                worker.wait(timeout=15)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait(timeout=5)
        for log in logs:
            log.unlink(missing_ok=True)


@pytest.mark.worker
def test_two_shard_workers_evaluate_each_report_once_and_in_host_order(
        shard_workers, post_report, make_report, enrolled):
    text = CAPTURE.read_text()
    hosts = [enrolled(f"machine-{i}", f"node-{i}") for i in range(HOSTS)]
    assert {evaluation_queue(host.pk) for host, _ in hosts} == {"evaluate.0", "evaluate.1"}
    start = datetime.now(UTC) - timedelta(hours=1)
    for step in range(REPORTS_PER_HOST):  # interleaved across hosts, as a fleet reports
        for host, token in hosts:
            at = start + timedelta(seconds=30 * step)
            metrics = {"format": "prometheus-text", "scraped_at": iso(at), "text": "",
                       "compact": grown(compact(text), 1 + step / 10)}
            report = make_report(server={"metrics": metrics},
                                 host={"machine_id": host.machine_id,
                                       "hostname": host.hostname}, collected_at=iso(at))
            assert post_report(report, token=token).status_code == 202
    total = HOSTS * REPORTS_PER_HOST
    assert _wait_for(lambda: Report.objects.filter(evaluated_at__isnull=False).count() == total,
                     180), "the shard workers did not evaluate every report"

    done = [re.findall(r"evaluate_report\[[^\]]+\] succeeded in [0-9.e-]+s: (\w+)",
                       log.read_text()) for log in shard_workers]
    # A report the steady lane applied in the request (fleet.lane: nothing changed but
    # metrics, no metric rule due) is derived and evaluated in one statement, never queued.
    queued = {host.pk: Report.objects.filter(host=host).exclude(
        derived_at=F("evaluated_at")).count() for host, _ in hosts}
    assert sum(len(d) for d in done) == sum(queued.values())  # no report delivered twice
    assert all(result == "True" for d in done for result in d)  # each evaluated by its task
    per_shard = [sum(queued[host.pk] for host, _ in hosts
                     if evaluation_queue(host.pk) == f"evaluate.{shard}")
                 for shard in range(SHARDS)]
    assert [len(d) for d in done] == per_shard  # each host's reports on its own shard
    for host, _ in hosts:
        rows = list(Report.objects.filter(host=host).order_by("collected_at"))
        derived = [r.derived_at for r in rows]
        assert derived == sorted(derived)  # applied in collected order
        samples = MetricSample.objects.filter(server__host=host).order_by("ts")
        assert [s.window_kind for s in samples] == ["lifetime"] + ["delta"] * (
            REPORTS_PER_HOST - 1)  # no report was skipped as a late replay
