"""Shared helpers of the server benchmarks (ingest, latency, evaluation, storage).

Not a benchmark itself (``make bench`` runs every ``bench/*.py``; this one exits at once).
What it gives the others:

* a dedicated PostgreSQL database per run (:func:`bench_database`: created with
  ``CREATE DATABASE``, migrated, dropped at the end) and Redis db 11, flushed before and
  after, so nothing touches the test or demo data;
* :func:`bench_env`: the environment of every process of a run (settings come from the
  environment only), with the per-token rate limit lifted (``INGEST_RATE``/``INGEST_BURST``);
* :class:`Gunicorn`: a gunicorn server on a random 127.0.0.1 port, for the product
  (``config.wsgi``) or the bare baseline app (``bench/baseline_app``);
* :func:`realistic_report`: contract reports built from real inputs, the argv of
  ``demo/data/cases/reports`` and the full ``/metrics`` captures of ``demo/data/cases/metrics``;
* :func:`post_all`: a threaded HTTP client (``http.client``, one connection per request as
  gunicorn's sync workers close them) that posts pre-built gzip bodies.

Import it from a bench script after ``sys.path.insert(0, str(REPO / "bench"))``.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __name__ == "__main__":
    print("bench/common.py holds helpers of the server benchmarks: nothing to run.")
    sys.exit(0)

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
VENV_BIN = REPO / ".venv" / "bin"
CASES_REPORTS = REPO / "demo" / "data" / "cases" / "reports"
CASES_METRICS = REPO / "demo" / "data" / "cases" / "metrics"
PG_HOST, PG_PORT, PG_USER = "127.0.0.1", 5432, "postgres"
#: Redis database of the benchmarks (tests use 15, the demo none): flushed before and after.
#: ``BENCH_REDIS_DB`` picks another one when two people benchmark on one machine.
REDIS_DB = int(os.environ.get("BENCH_REDIS_DB", "11"))
#: Appended to every benchmark database name (``BENCH_DB_SUFFIX``), for the same reason.
DB_SUFFIX = os.environ.get("BENCH_DB_SUFFIX", "")
REDIS_URL = f"redis://127.0.0.1:6379/{REDIS_DB}"
#: Full, recent /metrics bodies (vLLM 0.11 - 0.29, 45-54 KB each; cases/metrics/INDEX.md,
#: "Added 2026 pass"): what a real server serves and the agent ships untrimmed.
FULL_CAPTURES = (
    "hardware-aware-router_v0.11.x_qwen1.5-0.5b-idle.prom",
    "vllm-benchmarking-fixture_v0.25.1_opt-125m-tp2-loaded.prom",
    "vllm-benchmarking-fixture_v0.25.1_opt-125m-ngram3-specdecode.prom",
    "inferstack-fixture_v0.29.0_qwen2.5-1.5b-t4.prom",
)
#: Version each capture was served by (same INDEX.md table); the report says the same.
CAPTURE_VERSIONS = ("0.11.0", "0.25.1", "0.25.1", "0.29.0")

sys.path.insert(0, str(REPO))


# --------------------------------------------------------------------------- database


def _admin_connect() -> Any:
    import psycopg

    return psycopg.connect(host=PG_HOST, port=PG_PORT, user=PG_USER, dbname="postgres",
                           autocommit=True, connect_timeout=5)


def database_url(name: str) -> str:
    """``postgres://`` URL of database ``name`` on the local server (trust auth)."""
    return f"postgres://{PG_USER}@{PG_HOST}:{PG_PORT}/{name}"


def drop_database(name: str) -> None:
    """Drop ``name`` if it exists, closing other sessions (``WITH (FORCE)``, PostgreSQL 13+)."""
    with _admin_connect() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def bench_database(name: str) -> Iterator[str]:
    """Create a fresh database ``name``, yield its URL, drop it afterwards (also on error).

    Raises psycopg.OperationalError when PostgreSQL is not reachable on 127.0.0.1:5432.
    """
    name += DB_SUFFIX
    drop_database(name)
    with _admin_connect() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield database_url(name)
    finally:
        with contextlib.suppress(Exception):
            from django.db import connections

            connections.close_all()
        drop_database(name)


def flush_redis() -> None:
    """Empty the benchmarks' Redis database (``REDIS_DB`` only)."""
    import redis

    redis.Redis.from_url(REDIS_URL, socket_timeout=5).flushdb()


def bench_env(db_url: str, **overrides: str) -> dict[str, str]:
    """Environment of every process of a run: product settings with the rate limit lifted.

    ``INGEST_RATE=100000/s`` and ``INGEST_BURST=100000`` keep the per-token limiter in the
    request path (its Redis round trips are part of the cost) but never refusing.
    """
    env = dict(os.environ)
    env.update({
        "DATABASE_URL": db_url, "REDIS_URL": REDIS_URL, "SECRET_KEY": "bench-only-not-secret",
        "DEBUG": "false", "INGEST_RATE": "100000/s", "INGEST_BURST": "100000",
        "LOG_LEVEL": "WARNING", "DJANGO_SETTINGS_MODULE": "config.settings",
        "PYTHONPATH": str(REPO),
        # STATIC_ROOT (var/static) exists only after collectstatic; the API never serves it.
        # Celery warns that root runs the worker (only on this container; harmless here).
        "PYTHONWARNINGS": "ignore:No directory at:UserWarning,"
                          "ignore:You're running the worker with superuser privileges",
    })
    env.update(overrides)
    return env


def setup_django(env: dict[str, str]) -> None:
    """Configure Django in this process with ``env`` and migrate the bench database."""
    os.environ.update({k: v for k, v in env.items() if k not in ("PYTHONPATH",)})
    import warnings

    import django
    from django.core.management import call_command

    warnings.filterwarnings("ignore", "No directory at", UserWarning)
    django.setup()
    call_command("migrate", verbosity=0, interactive=False)


def create_baseline_table() -> None:
    """The baseline's one table: the report JSON as jsonb under its unique report_id."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE IF NOT EXISTS bench_baseline_report ("
                       "id bigserial PRIMARY KEY, report_id uuid UNIQUE NOT NULL, "
                       "raw jsonb NOT NULL, received_at timestamptz NOT NULL DEFAULT now())")


def enroll_hosts(count: int, prefix: str = "bench") -> list[tuple[str, str, str]]:
    """Create ``count`` hosts with one token each; returns ``(machine_id, hostname, token)``.

    Bulk inserts straight into the bench database, 1,000 rows a statement, with the token
    rows ``AgentToken.issue`` would write (sha256 + prefix of a ``fat_`` secret): 10,000
    hosts take seconds, where 10,000 HTTP enrollments would take minutes and measure the
    enrollment endpoint, which no benchmark is about.
    """
    import secrets

    from fleet.models import TOKEN_PREFIX_LEN, AgentToken, Host, sha256_hex

    hosts = Host.objects.bulk_create(
        [Host(machine_id=f"{prefix}-{i:05d}", hostname=f"{prefix}-node-{i}")
         for i in range(count)], batch_size=1000)
    plaintexts = ["fat_" + secrets.token_urlsafe(32) for _ in hosts]
    AgentToken.objects.bulk_create(
        [AgentToken(host=host, token_hash=sha256_hex(text), prefix=text[:TOKEN_PREFIX_LEN])
         for host, text in zip(hosts, plaintexts, strict=True)], batch_size=1000)
    return [(host.machine_id, host.hostname, text)
            for host, text in zip(hosts, plaintexts, strict=True)]


def wait_for_vacuum_horizon(limit_s: float = 120.0) -> bool:
    """Wait until every transaction older than now has ended, in any database of the
    server; True when it happened within ``limit_s``.

    VACUUM (FULL) keeps row versions deleted after the oldest running transaction began,
    and a snapshot's horizon is server-wide: on a machine where other test suites hold
    transactions open, rows deleted a moment ago still count as live data unless we wait.
    """
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT txid_current()")
        mine = cursor.fetchone()[0]
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            cursor.execute("SELECT txid_snapshot_xmin(txid_current_snapshot())")
            if cursor.fetchone()[0] > mine:
                return True
            time.sleep(0.5)
    return False


def table_bytes(cursor: Any, table: str) -> int:
    """Bytes of ``table`` with TOAST and indexes, summed over its partitions when it is
    partitioned (a partitioned parent alone is 0 bytes)."""
    cursor.execute("SELECT COALESCE((SELECT sum(pg_total_relation_size(relid)) "
                   "FROM pg_partition_tree(%s::regclass)), pg_total_relation_size(%s::regclass))"
                   "::bigint", [table, table])
    return cursor.fetchone()[0]


# --------------------------------------------------------------------------- servers


def free_port() -> int:
    """An unused TCP port on 127.0.0.1 (bound then released; a race is harmless here)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Gunicorn:
    """A gunicorn process serving ``app`` on 127.0.0.1 with ``workers`` sync workers.

    ``baseline=True`` serves ``baseline_app.wsgi`` (``bench/`` on the path) instead of
    the product. Use as a context manager; ``url`` is ``http://127.0.0.1:PORT``.
    Raises RuntimeError when the server does not answer within 60 s.
    """

    def __init__(self, env: dict[str, str], workers: int, baseline: bool = False):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = dict(env)
        self.workers = workers
        self.baseline = baseline
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> Gunicorn:
        app = "baseline_app.wsgi:application" if self.baseline else "config.wsgi:application"
        if self.baseline:
            self.env["DJANGO_SETTINGS_MODULE"] = "baseline_app.settings"
            self.env["PYTHONPATH"] = f"{BENCH}{os.pathsep}{REPO}"
        cmd = [str(VENV_BIN / "gunicorn"), app, "--bind", f"127.0.0.1:{self.port}",
               "--workers", str(self.workers), "--worker-class", "sync",
               "--log-level", "warning", "--timeout", "60", "--chdir", str(REPO)]
        self.proc = subprocess.Popen(cmd, env=self.env, cwd=REPO, start_new_session=True)
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        path = "/baseline/health" if self.baseline else "/api/v1/health"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"gunicorn exited with {self.proc.returncode}")
            with contextlib.suppress(OSError):
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                conn.request("GET", path)
                if conn.getresponse().status == 200:
                    return
            time.sleep(0.2)
        raise RuntimeError(f"gunicorn on port {self.port} did not answer {path} in 60 s")

    def __exit__(self, *exc: object) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)  # our own session: the master + workers
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


@contextlib.contextmanager
def celery_worker(env: dict[str, str], concurrency: int = 1) -> Iterator[subprocess.Popen]:
    """A Celery worker (prefork, ``concurrency`` processes) on every queue; stopped after."""
    cmd = [str(VENV_BIN / "celery"), "--quiet", "-A", "config", "worker",
           "-Q", "evaluate,alerts,default", "--concurrency", str(concurrency),
           "--loglevel", "WARNING", "--without-gossip",
           "--without-mingle", "--without-heartbeat", "-n", f"bench-{uuid.uuid4().hex[:6]}@%h"]
    # stdout carries only the banner and "Warm shutdown"; errors go to stderr.
    proc = subprocess.Popen(cmd, env=env, cwd=REPO, start_new_session=True,
                            stdout=subprocess.DEVNULL)
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


# --------------------------------------------------------------------------- reports


def iso(ts: datetime) -> str:
    """RFC 3339 UTC with a Z, as the agent sends it."""
    return ts.astimezone(UTC).isoformat().replace("+00:00", "Z")


def case_argvs() -> list[list[str]]:
    """Real server command lines (``vllm serve ...`` form) of ``demo/data/cases/reports``."""
    argvs = []
    for path in sorted(CASES_REPORTS.glob("*.json")):
        argv = json.loads(path.read_text()).get("argv")
        if isinstance(argv, list) and argv[:2] == ["vllm", "serve"]:
            argvs.append([str(a) for a in argv])
    return argvs


def captures() -> list[str]:
    """The full /metrics captures (:data:`FULL_CAPTURES`) as text."""
    return [(CASES_METRICS / name).read_text() for name in FULL_CAPTURES]


@dataclass
class Fleet:
    """Real inputs for a synthetic fleet: argv per host and the /metrics capture it serves."""

    argvs: list[list[str]] = field(default_factory=case_argvs)
    texts: list[str] = field(default_factory=captures)


def realistic_report(fleet: Fleet, host_index: int, machine_id: str, hostname: str,
                     collected_at: datetime, pid: int = 4242,
                     with_metrics: bool = True, metrics_form: str = "text",
                     step: int = 0) -> dict[str, Any]:
    """One contract report: one vLLM server (real argv, full real /metrics body), 2 H100s.

    The server's version matches the capture's. Size ~50-60 KB of JSON, 5-8 KB gzipped;
    ``with_metrics=False`` sends ``metrics: null`` (an unreachable /metrics), ~2 KB.
    ``metrics_form``: ``text`` (an older agent), ``compact`` (a newer agent after its first
    cycle: numbers only, ~6 KB of JSON) or ``both`` (a newer agent's first cycle);
    ``step`` > 0 moves every compact number up by ``step`` percent (a later scrape).
    """
    argv = fleet.argvs[host_index % len(fleet.argvs)]
    capture = host_index % len(fleet.texts)
    at = iso(collected_at)
    gpus = [{"index": i, "uuid": f"GPU-{machine_id}-{i}", "name": "NVIDIA H100 80GB HBM3",
             "memory_total_bytes": 85520809984, "memory_used_bytes": 76000000000 + i,
             "compute_capability": "9.0", "utilization_gpu_pct": 93.0, "temperature_c": 61.0,
             "power_draw_w": 612.5, "power_limit_w": 700.0} for i in range(2)]
    model = argv[2] if len(argv) > 2 and not argv[2].startswith("-") else "unknown"
    server = {"pid": pid, "started_at": "2026-11-01T08:00:00Z", "argv": argv,
              "env": {"CUDA_VISIBLE_DEVICES": "0,1", "HF_TOKEN": "REDACTED"},
              "base_url": "http://127.0.0.1:8000", "gpu_uuids": [g["uuid"] for g in gpus],
              "vllm_version": CAPTURE_VERSIONS[capture],
              "installed_vllm_version": CAPTURE_VERSIONS[capture],
              "models": [{"id": model, "root": model, "max_model_len": 65536}],
              "chat_template": {"source": "tokenizer_config.json", "sha256": "ab" * 32,
                                "size_bytes": 18683},
              "metrics": _metrics_block(fleet.texts[capture], at, metrics_form, step)
              if with_metrics else None,
              "errors": []}
    return {"schema_version": 1, "report_id": str(uuid.uuid4()), "collected_at": at,
            "agent": {"version": "0.1.0", "interval_s": 30, "spool_dropped": 0},
            "host": {"hostname": hostname, "machine_id": machine_id, "os": "Ubuntu 24.04",
                     "kernel": "6.8.0", "nvidia_driver_version": "580.95.05",
                     "cuda_driver_version": "13.0"},
            "gpus": gpus, "gpu_error": None, "servers": [server]}


def _metrics_block(text: str, at: str, form: str, step: int) -> dict[str, Any]:
    block: dict[str, Any] = {"format": "prometheus-text", "scraped_at": at,
                             "text": text if form in ("text", "both") else ""}
    if form in ("compact", "both"):
        block["compact"] = _grown(_compact_of(text), 1 + step / 100)
    return block


@functools.lru_cache(maxsize=32)
def _compact_json(text: str) -> str:
    from fleet_agent.metrics_compact import compact

    return json.dumps(compact(text))


def _compact_of(text: str) -> dict[str, Any]:
    return json.loads(_compact_json(text))


def _grown(block: dict[str, Any], factor: float) -> dict[str, Any]:
    """Every value of a compact block times ``factor`` (counters grow between scrapes)."""
    for series in block["samples"].values():
        for pair in series:
            pair[1] *= factor
    for series in block["histograms"].values():
        for hist in series:
            hist["counts"] = [c * factor for c in hist["counts"]]
            for key in ("sum", "count"):
                if hist[key] is not None:
                    hist[key] *= factor
    return block


def gzip_json(data: dict[str, Any]) -> bytes:
    """The agent's wire form: compact JSON, gzip level 6 (fleet_agent/deliver.py)."""
    return gzip.compress(json.dumps(data, separators=(",", ":")).encode(), compresslevel=6)


# --------------------------------------------------------------------------- client


@dataclass
class PostResult:
    """Outcome of :func:`post_all`: status counts, wall seconds, per-request seconds."""

    statuses: Counter = field(default_factory=Counter)
    elapsed_s: float = 0.0
    latencies_s: list[float] = field(default_factory=list)
    sent_at: dict[int, float] = field(default_factory=dict)

    @property
    def accepted(self) -> int:
        """Requests answered 202 (product) or 201 (baseline)."""
        return self.statuses[202] + self.statuses[201]

    @property
    def rate(self) -> float:
        """Accepted requests per wall second."""
        return self.accepted / self.elapsed_s if self.elapsed_s else 0.0


def post_one(port: int, path: str, body: bytes, token: str | None) -> int:
    """POST one gzip body; returns the HTTP status, or 0 on a connection error."""
    headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request("POST", path, body=body, headers=headers)
        response = conn.getresponse()
        response.read()
        conn.close()
        return response.status
    except OSError:
        return 0


def post_all(port: int, path: str, jobs: Sequence[tuple[bytes, str | None]],
             threads: int) -> PostResult:
    """POST every ``(body, token)`` of ``jobs`` with ``threads`` client threads.

    Jobs of one token must stay in order (a host's reports): job ``i`` goes to thread
    ``i % threads``, so give each host a stride of ``threads``-aligned positions or accept
    that two reports of one host may be in flight together (the server serialises them).
    """
    result = PostResult()
    lock = threading.Lock()

    def worker(offset: int) -> None:
        for index in range(offset, len(jobs), threads):
            body, token = jobs[index]
            start = time.perf_counter()
            status = post_one(port, path, body, token)
            took = time.perf_counter() - start
            with lock:
                result.statuses[status] += 1
                result.latencies_s.append(took)
                result.sent_at[index] = start

    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    start = time.perf_counter()
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    result.elapsed_s = time.perf_counter() - start
    return result


def median(values: Sequence[float]) -> float:
    """Median, 0.0 for no values."""
    return statistics.median(values) if values else 0.0


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile ``q`` in [0, 100] of ``values`` (0.0 when empty)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def machine_note() -> str:
    """One line naming the machine the figures were taken on."""
    cores = os.cpu_count()
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{cores} cores, {mem_gib:.0f} GiB, load average {os.getloadavg()[0]:.2f} at start"


def api_client() -> Any:
    """An in-process Django test client for the product API (Host header allowed)."""
    from django.test import Client

    return Client(HTTP_HOST="127.0.0.1")


def post_in_process(client: Any, body: bytes, token: str) -> int:
    """POST one gzip body to ``/api/v1/reports`` through the WSGI handler; the status."""
    response = client.post("/api/v1/reports", body, content_type="application/json",
                           headers={"Authorization": f"Bearer {token}",
                                    "Content-Encoding": "gzip"})
    return response.status_code
