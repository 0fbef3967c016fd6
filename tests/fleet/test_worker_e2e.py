"""End to end on real services: a POSTed report is evaluated by a real Celery worker process
consuming the real Redis broker, against the same (committed) test database."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from fleet.models import Report

ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 120
EVALUATED_TIMEOUT_S = 120


def _database_url() -> str:
    db = connection.settings_dict
    user = db.get("USER") or "postgres"
    auth = f"{user}:{db['PASSWORD']}" if db.get("PASSWORD") else user
    host, port = db.get("HOST") or "127.0.0.1", db.get("PORT") or 5432
    return f"postgres://{auth}@{host}:{port}/{db['NAME']}"


@pytest.fixture
def celery_worker_process(transactional_db: None) -> Iterator[subprocess.Popen]:
    """A `celery -A config worker` subprocess on the test database; always killed after."""
    if not settings.REDIS_URL:
        pytest.fail("the worker test needs REDIS_URL (run `make test`)")
    import redis

    redis.Redis.from_url(settings.REDIS_URL).flushdb()  # stale tasks of earlier runs
    env = {**os.environ, "DATABASE_URL": _database_url(), "REDIS_URL": settings.REDIS_URL,
           "SECRET_KEY": "worker-test", "DEBUG": "false"}
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)  # noqa: SIM115
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "config", "worker", "-Q", "evaluate,default",
         "--pool", "solo", "--without-gossip", "--without-mingle", "--without-heartbeat",
         "--loglevel", "INFO", "-n", f"test-{os.getpid()}@%h"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_for(lambda: "ready." in Path(log.name).read_text() or worker.poll() is not None,
                  READY_TIMEOUT_S)
        if worker.poll() is not None:
            pytest.fail(f"worker exited: {Path(log.name).read_text()[-3000:]}")
        yield worker
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=15)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait(timeout=5)
        log.close()
        os.unlink(log.name)


def _wait_for(predicate, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


@pytest.mark.worker
def test_a_real_worker_marks_a_posted_report_evaluated(celery_worker_process, post_report,
                                                       make_report, enrolled):
    _, token = enrolled()
    report = make_report()
    assert post_report(report, token=token).status_code == 202
    row = Report.objects.get(report_id=report["report_id"])

    def evaluated() -> bool:
        row.refresh_from_db()
        return row.evaluated_at is not None

    assert _wait_for(evaluated, EVALUATED_TIMEOUT_S), "the worker never evaluated the report"
    assert row.evaluation_error == ""
