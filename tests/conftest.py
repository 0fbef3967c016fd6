"""Shared test fixtures: a contract report builder, enrolled hosts and an API poster.

Tests run on real PostgreSQL and Redis (``make test`` sets DATABASE_URL and
REDIS_URL); a run against the SQLite default is refused up front.
"""

from __future__ import annotations

import copy
import gzip
import json
import os
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest


def pytest_configure(config: pytest.Config) -> None:
    # WhiteNoise warns that STATIC_ROOT (var/static) is missing: only collectstatic fills it.
    config.addinivalue_line("filterwarnings", "ignore:No directory at:UserWarning")
    # Metric rules fall due on each host's own phase of the interval (audit.cadence), drawn
    # from the host's row id, which depends on the tests run before. Tests count the interval
    # from the last evaluation instead, so what is due on which report does not depend on
    # the test order (workers and servers the tests start inherit it);
    # tests/audit_db/test_metric_cadence.py turns the spread on.
    os.environ.setdefault("AUDIT_METRICS_SPREAD", "false")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Fail fast with a clear message when the tests would run on SQLite."""
    from django.conf import settings

    needs_db = any(item.get_closest_marker("django_db") or "db" in getattr(
        item, "fixturenames", ()) for item in items)
    if needs_db and settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"):
        raise pytest.UsageError(
            "tests need PostgreSQL and Redis: run `make test`, or set DATABASE_URL="
            "postgres://postgres@127.0.0.1:5432/fleet_audit REDIS_URL=redis://127.0.0.1:6379/15")


@pytest.fixture(autouse=True)
def _fresh_cache(request: pytest.FixtureRequest) -> None:
    """Rate-limit buckets live in the cache, token lookups in the process (fleet.token_cache);
    each test starts with both empty.

    Pure-Python suites may run without Django (``-p no:django``): nothing to clear then.
    """
    if not request.config.pluginmanager.has_plugin("django"):
        return
    from django.core.cache import cache

    from fleet import token_cache

    cache.clear()
    token_cache.forget_all()  # tokens of a rolled-back test never answer for another one


@pytest.fixture(autouse=True)
def _metrics_interval_from_last_evaluation(request: pytest.FixtureRequest) -> None:
    """See :func:`pytest_configure`: the spread of metric rules off unless a test turns it
    on (settings read when the process started may predate the environment variable)."""
    if not request.config.pluginmanager.has_plugin("django"):
        return
    from django.conf import settings

    settings.AUDIT_METRICS_SPREAD = False


def iso(ts: datetime) -> str:
    """RFC 3339 UTC with a Z, as the agent sends it."""
    return ts.astimezone(UTC).isoformat().replace("+00:00", "Z")


BASE_REPORT: dict[str, Any] = {
    "schema_version": 1,
    "agent": {"version": "0.1.0", "interval_s": 30, "spool_dropped": 0},
    "host": {"hostname": "gpu-node-1", "machine_id": "machine-1", "os": "Ubuntu 22.04",
             "kernel": "5.15.0", "nvidia_driver_version": "580.95.05",
             "cuda_driver_version": "13.0"},
    "gpus": [{"index": 0, "uuid": "GPU-aaaa", "name": "NVIDIA H100 80GB HBM3",
              "memory_total_bytes": 85520809984, "memory_used_bytes": 80000000000,
              "compute_capability": "9.0", "utilization_gpu_pct": 97, "temperature_c": 61,
              "power_draw_w": 612.5, "power_limit_w": 700.0}],
    "gpu_error": None,
    "servers": [{
        "pid": 1234, "started_at": "2026-11-29T08:00:00Z",
        "argv": ["vllm", "serve", "google/gemma-4-31B-it", "--max-model-len", "65536"],
        "env": {"CUDA_VISIBLE_DEVICES": "0", "HF_TOKEN": "REDACTED"},
        "container_image": None, "base_url": "http://127.0.0.1:8000", "gpu_uuids": ["GPU-aaaa"],
        "vllm_version": "0.25.1", "installed_vllm_version": "0.25.1",
        "models": [{"id": "google/gemma-4-31B-it", "root": "google/gemma-4-31B-it",
                    "max_model_len": 65536}],
        "chat_template": {"source": "tokenizer_config.json", "sha256": "a" * 64,
                          "size_bytes": 18683},
        "metrics": None, "errors": []}],
}


@pytest.fixture
def make_report() -> Callable[..., dict[str, Any]]:
    """Build a valid contract report; keyword overrides replace top-level keys,
    ``server`` updates servers[0], ``host`` updates the host block."""
    def build(server: dict[str, Any] | None = None, host: dict[str, Any] | None = None,
              **top: Any) -> dict[str, Any]:
        report = copy.deepcopy(BASE_REPORT)
        report["report_id"] = str(uuid.uuid4())
        report["collected_at"] = iso(datetime.now(UTC))
        report["servers"][0].update(server or {})
        report["host"].update(host or {})
        report.update(top)
        return report
    return build


def _host_factory() -> Any:
    """factory_boy factory for fleet.models.Host (built lazily: models need Django set up)."""
    import factory
    from factory.django import DjangoModelFactory

    from fleet.models import Host

    class HostFactory(DjangoModelFactory):
        class Meta:
            model = Host
            django_get_or_create = ("machine_id",)

        machine_id = factory.Sequence(lambda n: f"machine-{n}")
        hostname = factory.LazyAttribute(lambda o: f"node-{o.machine_id}")

    return HostFactory


@pytest.fixture
def host_factory(db: None) -> Any:
    """The Host factory (``host_factory(machine_id=..., hostname=...)``)."""
    return _host_factory()


@pytest.fixture
def enrolled(host_factory: Any) -> Callable[..., tuple[Any, str]]:
    """Create a host (machine-1 unless given) and return ``(host, plaintext_token)``."""
    from fleet.models import AgentToken

    def enroll(machine_id: str = "machine-1", hostname: str = "gpu-node-1") -> tuple[Any, str]:
        host = host_factory(machine_id=machine_id, hostname=hostname)
        _, token = AgentToken.issue(host)
        return host, token
    return enroll


@pytest.fixture
def post_report(client: Any) -> Callable[..., Any]:
    """POST a report (dict, or raw bytes) to /api/v1/reports with an optional token, then,
    inside a test transaction (where the on-commit task is never sent), run the worker's
    first step on an accepted one (``fleet.recording.derive_report``: ingest only stores the
    raw body). Transactional tests commit, so their real workers derive."""
    from django.db import connection

    from fleet.recording import derive_report

    def post(body: dict[str, Any] | bytes, token: str | None, gzipped: bool = False,
             http: Any = None) -> Any:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        if gzipped:
            data, headers["Content-Encoding"] = gzip.compress(data), "gzip"
        response = (http or client).post("/api/v1/reports", data,
                                          content_type="application/json", headers=headers)
        if response.status_code == 202 and connection.in_atomic_block:
            derive_report(response.json()["report_id"])
        return response
    return post


@pytest.fixture
def signed_in(client: Any) -> Any:
    """The test client logged in as a plain operator (no staff rights)."""
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_user("op", password="pw-123456789")
    client.force_login(user)
    return client
