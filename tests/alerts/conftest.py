"""Fixtures of the alert tests: local receivers, an SMTP sink, in-process Celery, real workers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from alertkit import WAIT_S, Receiver, start_smtp, wait_for

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A local HTTP receiver (answers 200 ``ok`` unless scripted)."""
    server = Receiver().start()
    yield server
    server.stop()


@pytest.fixture
def allow_local(settings: Any) -> None:
    """Let channels reach 127.0.0.1 (refused by default: SSRF)."""
    settings.ALERTS_ALLOW_PRIVATE_WEBHOOKS = True


@pytest.fixture
def smtp(settings: Any) -> Iterator[Any]:
    """An aiosmtpd server; Django's SMTP backend points at it."""
    controller, sink = start_smtp()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", controller.port
    settings.EMAIL_USE_TLS = settings.EMAIL_USE_SSL = False
    settings.EMAIL_HOST_USER = settings.EMAIL_HOST_PASSWORD = ""
    yield sink
    controller.stop()


@pytest.fixture
def eager(settings: Any) -> Iterator[None]:
    """Run Celery tasks in-process (retries too, without their countdown)."""
    from config.celery import app

    settings.ALERT_RETRY_BASE_S, settings.ALERT_RETRY_MAX_S = 0.01, 0.05
    before = app.conf.task_always_eager
    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = before


@pytest.fixture
def run_dispatch(eager: None, django_capture_on_commit_callbacks: Any) -> Callable[..., int]:
    """Run ``alerts.dispatch_events`` now and the sends it enqueues (in-process)."""
    from alerts.alert_tasks import dispatch_events

    def run() -> int:
        with django_capture_on_commit_callbacks(execute=True):
            return dispatch_events()
    return run


# --- real workers ------------------------------------------------------------------

def _database_url() -> str:
    from django.db import connection

    db = connection.settings_dict
    user = db.get("USER") or "postgres"
    auth = f"{user}:{db['PASSWORD']}" if db.get("PASSWORD") else user
    host, port = db.get("HOST") or "127.0.0.1", db.get("PORT") or 5432
    return f"postgres://{auth}@{host}:{port}/{db['NAME']}"


class Workers:
    """Start ``celery worker -Q alerts`` subprocesses (app: ``alerts_worker_app``)."""

    def __init__(self, gate_dir: Path) -> None:
        self.gate_dir = gate_dir
        self.procs: list[tuple[subprocess.Popen, Path]] = []

    def start(self) -> subprocess.Popen:
        from django.conf import settings

        log = Path(tempfile.mkstemp(suffix=".log", prefix="alerts-worker-")[1])
        env = {**os.environ, "DATABASE_URL": _database_url(), "REDIS_URL": settings.REDIS_URL,
               "SECRET_KEY": "worker-test", "DEBUG": "false",
               "PYTHONPATH": f"{HERE}{os.pathsep}{ROOT}", "ALERT_TEST_GATE_DIR": str(self.gate_dir)}
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "alerts_worker_app", "worker", "-Q", "alerts",
             "--pool", "solo", "--without-gossip", "--without-mingle", "--without-heartbeat",
             "--loglevel", "INFO", "-n", f"alerts-{len(self.procs)}-{os.getpid()}@%h"],
            cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
            start_new_session=True)
        self.procs.append((proc, log))
        if not wait_for(lambda: "ready." in log.read_text() or proc.poll() is not None):
            pytest.fail(f"the alerts worker did not start within {WAIT_S:.0f} s")
        if proc.poll() is not None:
            pytest.fail(f"the alerts worker exited: {log.read_text()[-3000:]}")
        return proc

    @staticmethod
    def kill9(proc: subprocess.Popen) -> None:
        """SIGKILL the worker's whole process group (no chance to ack or restore)."""
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)

    def logs(self) -> str:
        return "\n".join(log.read_text()[-4000:] for _, log in self.procs)

    def stop_all(self) -> None:
        for proc, log in self.procs:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=5)
            log.unlink(missing_ok=True)


@pytest.fixture
def workers(transactional_db: None, tmp_path: Path) -> Iterator[Workers]:
    """Factory of real alerts workers on the (committed) test database and real Redis."""
    from django.conf import settings

    if not settings.REDIS_URL:
        pytest.fail("worker tests need REDIS_URL (run `make test`)")
    import redis

    redis.Redis.from_url(settings.REDIS_URL).flushdb()  # stale tasks of earlier runs
    pool = Workers(tmp_path)
    yield pool
    pool.stop_all()
