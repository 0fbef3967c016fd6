"""Benchmark: the dashboard's overview and host page on a large fleet in PostgreSQL.

Run (PostgreSQL must be up; the database is created and migrated when missing):

    .venv/bin/python bench/dashboard.py                 # 10,000 hosts, 30,000 servers,
                                                        # 200,000 open findings
    .venv/bin/python bench/dashboard.py --scale 0.1     # quick run (1,000 hosts)
    BENCH_DATABASE_URL=postgres://... .venv/bin/python bench/dashboard.py --reset

Data comes from ``bench/fleetgen.py`` (bulk_create; the generated fleet is kept between
runs, ``--reset`` drops it). Measured in the same run and printed as ratios:

- overview (``GET /``) median render time and SQL query count at 10 % and 100 % of the
  fleet, against two baselines: a bare ``SELECT count(*)`` view and the Django admin
  changelist of hosts (``/admin/fleet/host/``);
- the findings list and the knowledge-base page at the same scale;
- a host page with 24 h of 30 s samples (``GET /hosts/<code>/?window=24h`` and ``7d``),
  its query count and the largest series shipped to the browser.

Targets: overview < 300 ms median with a query count independent of the host
count; host page < 300 ms. Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/fleet_audit_bench"
TARGET_MS = 300.0  # overview, median


def _setup(database_url: str) -> None:
    """Point Django at the benchmark database (created when missing) and migrate it."""
    import psycopg

    name = database_url.rsplit("/", 1)[1]
    admin_url = database_url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{name}"')
    # The benchmark configures its own process before Django reads settings.
    os.environ["DATABASE_URL"] = database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("DEBUG", "false")
    os.environ.setdefault("SECRET_KEY", "bench-only-not-secret")
    os.environ.setdefault("ALLOWED_HOSTS", "testserver,localhost")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def _median_ms(fn: Callable[[], object], repeat: int) -> float:
    fn()  # warm caches (KB load, template compilation)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def _queries(fn: Callable[[], object]) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        fn()
    return len(captured)


def _get(client: object, path: str) -> Callable[[], object]:
    def call() -> object:
        response = client.get(path)  # type: ignore[attr-defined]
        if response.status_code != 200:
            raise SystemExit(f"{path} answered {response.status_code}")
        return response
    return call


def _cold(client: object, path: str) -> Callable[[], object]:
    """GET with an empty cache (the overview caches its filter drop-downs for 60 s)."""
    from django.core.cache import cache

    def call() -> object:
        cache.clear()
        return _get(client, path)()
    return call


def _bare_count() -> Callable[[], object]:
    """Baseline: a view that runs one ``SELECT count(*)`` and returns a tiny page."""
    from django.contrib.auth import get_user_model
    from django.http import HttpResponse
    from django.test import RequestFactory

    from fleet.models import Host

    request = RequestFactory().get("/")
    request.user = get_user_model().objects.get(username="bench")

    def view() -> object:
        return HttpResponse(f"{Host.objects.count()} hosts")
    return lambda: view()


def _client() -> object:
    from django.contrib.auth import get_user_model
    from django.test import Client

    user, created = get_user_model().objects.get_or_create(
        username="bench", defaults={"is_staff": True, "is_superuser": True})
    client = Client()
    client.force_login(user)
    return client


def overview_round(client: object, repeat: int, label: str) -> dict[str, float]:
    """Median ms and query counts of the overview (plus the findings and KB pages) and
    both baselines."""
    from audit.models import Finding
    from fleet.models import Host

    figures = {
        "hosts": Host.objects.count(),
        "overview_ms": _median_ms(_get(client, "/"), repeat),
        "overview_queries": _queries(_cold(client, "/")),
        "worst_filter_ms": _median_ms(_get(client, "/?severity=critical"), repeat),
        "by_name_ms": _median_ms(_get(client, "/?sort=host"), repeat),
        "findings_ms": _median_ms(_get(client, "/findings/"), repeat),
        "kb_ms": _median_ms(_get(client, "/kb/"), repeat),
        "count_ms": _median_ms(_bare_count(), repeat),
        "admin_ms": _median_ms(_get(client, "/admin/fleet/host/"), repeat),
    }
    print(f"\n[{label}] {figures['hosts']:,} hosts")
    print(f"  overview GET /           median {figures['overview_ms']:8.1f} ms, "
          f"{figures['overview_queries']} SQL queries (cold cache)")
    print(f"  overview ?severity=...   median {figures['worst_filter_ms']:8.1f} ms")
    print(f"  overview ?sort=host      median {figures['by_name_ms']:8.1f} ms")
    print(f"  findings GET /findings/  median {figures['findings_ms']:8.1f} ms "
          f"({Finding.objects.count():,} findings)")
    print(f"  knowledge base GET /kb/  median {figures['kb_ms']:8.1f} ms")
    print(f"  baseline SELECT count(*) median {figures['count_ms']:8.1f} ms "
          f"(overview = {figures['overview_ms'] / max(figures['count_ms'], 1e-3):.0f}x)")
    print(f"  baseline admin changelist median {figures['admin_ms']:7.1f} ms "
          f"(overview = {figures['overview_ms'] / figures['admin_ms']:.2f}x)")
    return figures


def _demo_host() -> object:
    """The LIGHT demo host (2 servers, EAGLE3) ingested through the API, with 24 h of
    30 s metric and GPU samples."""
    from django.core.management import call_command

    from bench import fleetgen
    from fleet.models import Host, MetricSample

    if not Host.objects.filter(hostname="gpu-h100-light-01").exists():
        call_command("demo_seed", stdout=open(os.devnull, "w"))  # noqa: SIM115
    host = Host.objects.get(hostname="gpu-h100-light-01")
    if MetricSample.objects.filter(server__host=host).count() < 2 * 2800:
        fleetgen.backfill(host, hours=24, step_s=30, spec_rate=0.45)
    return host


def host_round(client: object, repeat: int, admin_ms: float) -> None:
    """Median ms and queries of one host page over 24 h and 7 d windows."""
    import json
    import re

    from fleet.models import GpuSample, MetricSample

    host = _demo_host()
    samples = MetricSample.objects.filter(server__host=host).count()
    gpu_samples = GpuSample.objects.filter(gpu__host=host).count()
    print(f"\n[host page] {host.hostname}: {samples:,} metric samples, "
          f"{gpu_samples:,} GPU samples")
    for window in ("24h", "7d"):
        path = f"/hosts/{host.code}/?window={window}"
        median = _median_ms(_get(client, path), repeat)
        page = _get(client, path)().content.decode()  # type: ignore[attr-defined]
        blob = re.search(r'id="chart-data" type="application/json">(.*?)</script>', page, re.S)
        charts = json.loads(blob.group(1))["charts"]
        longest = max(len(d["data"]) for c in charts for d in c["datasets"])
        print(f"  GET {path[-11:]:<12} median {median:8.1f} ms, {_queries(_get(client, path))} "
              f"SQL queries, {len(blob.group(1)) / 1024:.0f} KiB chart JSON, longest series "
              f"{longest} points (admin changelist = {median / admin_ms:.2f}x)")
    _recommend_cost(host, repeat)


def _recommend_cost(host: object, repeat: int) -> None:
    """How much of the host page is the recommender (advice.recommend), when installed."""
    try:
        from advice.recommend import recommend_server
    except ImportError:
        print("  advice.recommend not installed: no recommendation cost")
        return
    from front.views_host import _raw_entry

    servers = list(host.servers.filter(is_running=True).select_related("last_report"))  # type: ignore[attr-defined]
    entries = [(_raw_entry(s.last_report, s), s.last_report) for s in servers]

    def run() -> None:
        for entry, report in entries:
            if entry is not None:
                recommend_server(entry, report.raw)
    print(f"  of which recommend_server for {len(entries)} server(s): "
          f"median {_median_ms(run, repeat):.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scale", type=float, default=1.0,
                        help="fraction of 10,000 hosts / 200,000 findings (default 1.0)")
    parser.add_argument("--repeat", type=int, default=15, help="timed runs per figure")
    parser.add_argument("--reset", action="store_true", help="drop the generated fleet first")
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL",
                                                                 DEFAULT_DB))
    args = parser.parse_args()
    _setup(args.database_url)
    from bench import fleetgen

    if args.reset:
        print(f"removed {fleetgen.clear():,} generated rows")
    hosts = int(10_000 * args.scale)
    client = _client()
    rounds = []
    from django.core.cache import cache

    for fraction in (0.1, 1.0):
        start = time.perf_counter()
        added = fleetgen.generate(hosts=max(1, int(hosts * fraction)),
                                  findings_per_host=20, spark_hosts=200)
        if added["hosts"]:
            print(f"\ngenerated {added['hosts']:,} hosts, {added['servers']:,} servers, "
                  f"{added['findings']:,} findings in {time.perf_counter() - start:.0f} s")
        from django.db import connection

        with connection.cursor() as cursor:
            # A live database has autovacuum keeping statistics and the visibility map
            # current; right after a bulk load only an explicit VACUUM does that.
            cursor.execute("VACUUM ANALYZE")
        cache.clear()
        rounds.append(overview_round(client, args.repeat, f"{int(fraction * 100)} % fleet"))
    small, large = rounds
    same = small["overview_queries"] == large["overview_queries"]
    print(f"\nqueries vs hosts: {small['overview_queries']} queries at {small['hosts']:,} "
          f"hosts, {large['overview_queries']} at {large['hosts']:,} "
          f"({'independent of' if same else 'DEPENDS ON'} the host count); overview time "
          f"ratio {large['overview_ms'] / small['overview_ms']:.2f}x for "
          f"{large['hosts'] / max(small['hosts'], 1):.0f}x hosts; target {TARGET_MS:.0f} ms: "
          f"{'met' if large['overview_ms'] < TARGET_MS else 'MISSED'}")
    host_round(client, args.repeat, large["admin_ms"])


if __name__ == "__main__":
    main()
