"""Fixtures of the fault tests: real dashboards, workers, agents and private servers.

Every process is started by a fixture (or a factory fixture) that stops it at
teardown, before pytest-django flushes the committed test database. Run with
``DATABASE_URL=postgres://postgres@127.0.0.1:5432/fleet_audit_fault
REDIS_URL=redis://127.0.0.1:6379/12 SECRET_KEY=x .venv/bin/pytest tests/fault``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from faultkit import (  # noqa: E402
    Agent,
    Dashboard,
    PrivatePostgres,
    PrivateRedis,
    Proc,
    Receiver,
    Worker,
    database_url,
    postgres_unavailable,
    server_env,
)


@pytest.fixture
def test_db_url(transactional_db: None) -> str:
    """URL of the (committed, shared with subprocesses) pytest test database."""
    from django.db import connection

    return database_url(connection.settings_dict)


@pytest.fixture
def shared_broker(transactional_db: None) -> str:
    """``REDIS_URL`` of this run (its own db number), emptied of earlier runs' tasks."""
    from django.conf import settings

    if not settings.REDIS_URL:
        pytest.fail("fault tests need REDIS_URL (e.g. redis://127.0.0.1:6379/12)")
    import redis

    redis.Redis.from_url(settings.REDIS_URL).flushdb()
    return settings.REDIS_URL


@pytest.fixture
def rules(transactional_db: None) -> None:
    """The shipped rules mirrored into the database (alert routing reads them)."""
    from audit.rulebook import sync_rules

    sync_rules()


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Callable[[Proc], Any]]:
    """Register a process to be stopped at teardown: agents first, then the rest, last
    started first."""
    started: list[Proc] = []

    def track(proc: Proc) -> Any:
        started.append(proc)
        return proc
    yield track
    errors = []
    for proc in sorted(reversed(started), key=lambda p: not isinstance(p, Agent)):
        try:
            proc.stop()
        except AssertionError as exc:  # an agent that did not exit cleanly
            errors.append(exc)
    if errors:
        raise errors[0]


@pytest.fixture
def dashboard(procs: Callable, tmp_path: Path) -> Callable[..., Dashboard]:
    """Factory: ``dashboard(db_url, redis_url)`` -> a started gunicorn :class:`Dashboard`."""
    def make(db_url: str, redis_url: str) -> Dashboard:
        return procs(Dashboard(server_env(db_url, redis_url), tmp_path / "gunicorn.log")).start()
    return make


@pytest.fixture
def worker(procs: Callable, tmp_path: Path) -> Callable[..., Worker]:
    """Factory: ``worker(db_url, redis_url, queues="evaluate", pool="solo", **env)`` -> a
    started worker.

    Extra keyword arguments become environment variables (``FAULT_VISIBILITY_S``...).
    """
    count = 0

    def make(db_url: str, redis_url: str, queues: str = "evaluate", pool: str = "solo",
             **env: str) -> Worker:
        nonlocal count
        count += 1
        log = tmp_path / f"worker-{count}.log"
        return procs(Worker(server_env(db_url, redis_url, **env), log, f"fault{count}",
                            queues, pool)).start()
    return make


@pytest.fixture
def agent(procs: Callable, tmp_path: Path) -> Callable[..., Agent]:
    """Factory: ``agent(server_url, token=None)`` -> an :class:`Agent`, not yet started."""
    def make(server_url: str, token: str | None = None) -> Agent:
        return procs(Agent(tmp_path / "agent", server_url, token))
    return make


@pytest.fixture
def private_redis(procs: Callable, tmp_path: Path) -> PrivateRedis:
    """A started throw-away redis-server (never the machine's shared one)."""
    return procs(PrivateRedis(tmp_path / "redis.log")).start()


@pytest.fixture
def private_postgres() -> Iterator[PrivatePostgres]:
    """An initialised, started throw-away PostgreSQL cluster; deleted at teardown."""
    reason = postgres_unavailable()
    if reason:
        pytest.skip(f"private PostgreSQL unavailable: {reason}")
    cluster = PrivatePostgres().init()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.destroy()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A local webhook receiver thread."""
    server = Receiver().start()
    yield server
    server.stop()
