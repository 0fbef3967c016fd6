"""Benchmark: what deleting a derived raw report costs, Django's collector against the one
statement per batch (``fleet.pruning.delete_reports``), in the same run.

Not a test. A 10,000-host fleet at 30 s stores 333 raw reports a second and, 30 minutes
later (``REPORT_RAW_RETENTION_MINUTES``), deletes as many: this cost belongs to every steady
report, beside the request and the worker (``bench/evaluation_throughput.py``).

Each round, ``--hosts`` hosts post ``--reports`` steady reports each through the real API in
this process (dedicated database ``fleet_bench_prune``, Redis db 11), their steady lanes
open as in a fleet (the worker ran on their first reports), so every report has its metric
sample; the reports are then aged past the raw retention and deleted, by the collector in
odd rounds and by the statement in even ones. Printed per way: application CPU and
PostgreSQL backend CPU per deleted report (medians over the rounds) and their ratio.

Run: ``.venv/bin/python bench/prune.py [--hosts 32 --reports 60 --rounds 4]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    Fleet,
    api_client,
    bench_database,
    bench_env,
    enroll_hosts,
    flush_redis,
    machine_note,
    median,
    post_in_process,
    setup_django,
)
from ingest import build_jobs, open_lanes  # noqa: E402
from soak import cpu_seconds  # noqa: E402


def prune_round(delete_way: str, fleet: Fleet, hosts: list[tuple[str, str, str]],
                reports: int, first_seq: int) -> tuple[int, float, float]:
    """Post ``reports`` steady reports per host, age them, delete them ``delete_way``
    (``collector`` or ``statement``); ``(deleted, app CPU s, PostgreSQL CPU s)``."""
    from django.conf import settings
    from django.db import connection
    from django.utils import timezone

    from fleet import pruning
    from fleet.models import Report

    client = api_client()
    start = datetime.now(UTC) - timedelta(days=2)
    for body, token in build_jobs(fleet, hosts, len(hosts) * reports, first_seq, start, True,
                                  "compact"):
        if post_in_process(client, body, token) != 202:
            raise RuntimeError("ingest refused a report")
    past = timezone.now() - timedelta(minutes=settings.REPORT_RAW_RETENTION_MINUTES + 1)
    Report.objects.update(received_at=past)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = cursor.fetchone()[0]
    cutoff = timezone.now() - timedelta(minutes=settings.REPORT_RAW_RETENTION_MINUTES)
    delete = pruning._delete_with_collector if delete_way == "collector" \
        else pruning.delete_reports
    pg, app = cpu_seconds([backend]), time.process_time()
    deleted = delete(cutoff, True, 1_000_000)
    return deleted, time.process_time() - app, cpu_seconds([backend]) - pg


def run(args: argparse.Namespace) -> None:
    """Alternate the two ways over ``--rounds`` rounds; print the medians and the ratio."""
    print(f"prune benchmark on {machine_note()}")
    with bench_database("fleet_bench_prune") as db_url:
        setup_django(bench_env(db_url, AUDIT_METRICS_INTERVAL_S="86400",
                               AUDIT_FINDING_SEEN_REFRESH_S="86400"))
        flush_redis()
        hosts = enroll_hosts(args.hosts, prefix="lane")
        fleet, client = Fleet(), api_client()
        start = datetime.now(UTC) - timedelta(days=2)
        for body, token in build_jobs(fleet, hosts, args.hosts * 2, 0, start, True, "compact"):
            post_in_process(client, body, token)
        open_lanes("lane")
        per: dict[str, list[tuple[float, float]]] = {"collector": [], "statement": []}
        seq = 2
        for round_ in range(args.rounds):
            way = "collector" if round_ % 2 == 0 else "statement"
            deleted, app, pg = prune_round(way, fleet, hosts, args.reports, seq)
            seq += args.reports
            per[way].append((app / deleted, pg / deleted))
            print(f"  {way:<9} deleted {deleted:6d}: application {app / deleted * 1000:6.3f} ms, "
                  f"PostgreSQL {pg / deleted * 1000:6.3f} ms per report")
        flush_redis()
    totals = {way: median([a + p for a, p in values]) for way, values in per.items()}
    for way, values in per.items():
        print(f"{way}: median application {median([a for a, _ in values]) * 1000:.3f} ms + "
              f"PostgreSQL {median([p for _, p in values]) * 1000:.3f} ms per deleted report "
              f"= {totals[way] * 1000:.3f} ms -> {totals[way] * 333:.3f} cores for 10,000 "
              f"hosts at 30 s")
    if totals["collector"]:
        print(f"statement / collector, same run: {totals['statement'] / totals['collector']:.2f}x")


def main() -> None:
    """Parse arguments and run."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", type=int, default=32)
    parser.add_argument("--reports", type=int, default=60, help="steady reports per host and round")
    parser.add_argument("--rounds", type=int, default=4)
    run(parser.parse_args())


if __name__ == "__main__":
    main()
