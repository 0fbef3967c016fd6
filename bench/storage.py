"""Benchmark: storage per host per day, and what retention/downsampling keeps it bounded.

Not a test. Target: at most 5 MB per host per 30 days, everything included.

On a dedicated database (``fleet_bench_storage``, dropped at the end): ``--hosts`` hosts
each send ``--hours`` hours of reports at the agent's 30 s interval through the real API
(in-process WSGI client), time-compressed by setting ``collected_at``/``scraped_at`` in the
past. Each report carries one vLLM server with a full real /metrics body (45-54 KB) and two
GPUs. Then, after ``VACUUM FULL`` (so sizes are live data, not dead tuples):

1. sizes right after ingest (``pg_total_relation_size``: heap + TOAST + indexes, summed
   over the daily partitions of the sample tables) per table,
   per row and per host per day;
2. ``fleet.tasks.prune_reports`` runs with its clock moved past the retention window
   (``SAMPLE_FULL_RESOLUTION_HOURS`` + 1 h later): derived, evaluated, unchanged raw
   reports go (kept ones and each server's newest stay), metric
   and GPU samples are thinned to the newest one per server/GPU per hour;
3. sizes again: what each further host-day costs once outside the raw window, x30.

Reference in the same run: the gzipped bytes the agent sent for that day (the wire cost).

The worker's steps (derive, evaluate) run in this process after each round of reports.

Run: ``.venv/bin/python bench/storage.py [--hosts 2 --hours 24]`` (``--hours`` above
``SAMPLE_FULL_RESOLUTION_HOURS``, so some samples are thinned).
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    Fleet,
    api_client,
    bench_database,
    bench_env,
    enroll_hosts,
    flush_redis,
    gzip_json,
    machine_note,
    post_in_process,
    realistic_report,
    setup_django,
    table_bytes,
    wait_for_vacuum_horizon,
)

TARGET_MB_PER_30_DAYS = 5.0  # <= 5 MB per host per 30 days, everything included
INTERVAL_S = 30  # agent default report interval
TABLES = ("fleet_report", "fleet_metricsample", "fleet_gpusample", "fleet_changeevent",
          "fleet_server", "fleet_gpu", "fleet_host")
#: Tables that grow with time at steady state (change events and kept reports grow per change).
GROWING = ("fleet_metricsample", "fleet_gpusample")
MB = 1_000_000


def ingest(hosts: list[tuple[str, str, str]], hours: float) -> int:
    """Post ``hours`` of 30 s reports per host ending now; returns gzip bytes sent."""
    fleet, client = Fleet(), api_client()
    count = int(hours * 3600 / INTERVAL_S)
    start = datetime.now(UTC) - timedelta(hours=hours)
    wire = 0
    for seq in range(count):
        at = start + timedelta(seconds=seq * INTERVAL_S)
        for index, (machine_id, hostname, token) in enumerate(hosts):
            body = gzip_json(realistic_report(fleet, index, machine_id, hostname, at))
            wire += len(body)
            if post_in_process(client, body, token) != 202:
                raise RuntimeError("ingest refused a report")
        work_off()
    return wire


def work_off() -> None:
    """The worker's two steps for every report not evaluated yet (derive, then evaluate),
    in collected order, as ``audit.tasks.evaluate_report`` does (ingest stores
    only the raw body)."""
    from audit.evaluation import evaluate_report
    from fleet.models import Report
    from fleet.recording import derive_report

    for report_id in (Report.objects.filter(evaluated_at=None).order_by("collected_at")
                      .values_list("report_id", flat=True)):
        derive_report(report_id)
        evaluate_report(report_id)


def sizes() -> dict[str, tuple[int, int]]:
    """``table -> (rows, bytes)`` after VACUUM FULL (heap + TOAST + indexes)."""
    from django.db import connection

    if not wait_for_vacuum_horizon():
        print("    (other sessions kept transactions open for 2 min: sizes include dead rows)")
    out = {}
    with connection.cursor() as cursor:
        for table in TABLES:
            # Table names come from the TABLES constant above, never from input.
            cursor.execute(f"VACUUM FULL {table}")
            cursor.execute(f"SELECT count(*) FROM {table}")  # noqa: S608
            out[table] = (cursor.fetchone()[0], table_bytes(cursor, table))
    return out


def show(title: str, table_sizes: dict[str, tuple[int, int]], host_days: float) -> None:
    """Print rows, bytes, bytes per row and MB per host per day for each table."""
    print(f"  {title}")
    for table, (rows, size) in table_sizes.items():
        per_row = size / rows if rows else 0
        print(f"    {table:<20} {rows:7d} rows {size / MB:8.2f} MB  {per_row:8.0f} B/row  "
              f"{size / MB / host_days:7.2f} MB/host/day")
    total = sum(size for _, size in table_sizes.values())
    print(f"    {'total':<20} {'':12} {total / MB:8.2f} MB  {'':14}"
          f"{total / MB / host_days:7.2f} MB/host/day")


def prune_later() -> dict[str, int]:
    """Run prune_reports with its clock past the retention window of every stored report."""
    from django.conf import settings
    from django.utils import timezone

    from fleet.tasks import prune_reports

    later = timezone.now() + timedelta(hours=settings.SAMPLE_FULL_RESOLUTION_HOURS + 1)
    with mock.patch("fleet.tasks.timezone.now", return_value=later):
        return prune_reports()


def run(args: argparse.Namespace) -> None:
    """Ingest, measure, prune, measure; print the per-host figures against the target."""
    print(f"storage benchmark on {machine_note()}")
    with bench_database("fleet_bench_storage") as db_url:
        setup_django(bench_env(db_url))
        flush_redis()
        from django.conf import settings

        hosts = enroll_hosts(args.hosts)
        wire = ingest(hosts, args.hours)
        flush_redis()  # evaluation was queued for a worker that is not running
        host_days = args.hosts * args.hours / 24
        before = sizes()
        show(f"after ingest ({args.hosts} hosts x {args.hours:g} h at {INTERVAL_S} s)",
             before, host_days)
        print(f"    reference: gzip bytes on the wire {wire / MB / host_days:.2f} MB/host/day; "
              f"stored/wire {sum(s for _, s in before.values()) / wire:.1f}x")
        deleted = prune_later()
        after = sizes()
        window_h = settings.SAMPLE_FULL_RESOLUTION_HOURS
        show(f"after prune_reports past the {window_h} h sample window (deleted {deleted})",
             after, host_days)
        summary(before, after, host_days, settings.SAMPLE_FULL_RESOLUTION_HOURS, args.hosts)


def summary(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]],
            host_days: float, retention_h: int, hosts: int) -> None:
    """Print the footprint of one host over 30 days, everything included (target
    <= 5 MB): full-resolution samples of the last ``SAMPLE_FULL_RESOLUTION_HOURS``, samples thinned
    to one per hour for the rest of the 30 days, the raw reports still kept (changes, each
    server's newest) and the inventory rows.

    Growth = rows left per host-day after the prune x bytes per row measured on the large
    pre-prune tables (a table of a few rows is all page and index overhead).
    """
    window_days = retention_h / 24
    full_res = sum(before[t][1] for t in GROWING) / MB / host_days * window_days
    thinned = 0.0
    for table in GROWING:
        rows_before, size_before = before[table]
        per_row = size_before / rows_before if rows_before else 0.0
        rows_per_day = after[table][0] / host_days
        thinned += rows_per_day * per_row * (30 - window_days) / MB
        print(f"    {table:<20} {rows_per_day:6.1f} rows/host/day kept x {per_row:6.0f} B/row")
    fixed = sum(size for table, (_, size) in after.items() if table not in GROWING) / MB / hosts
    total = full_res + thinned + fixed
    print(f"  per host over 30 days: {full_res:.2f} MB full-resolution samples "
          f"({retention_h} h) + {thinned:.2f} MB hourly samples + {fixed:.2f} MB kept reports "
          f"({after['fleet_report'][0]} rows), inventory and events = {total:.2f} MB "
          f"- target <= {TARGET_MB_PER_30_DAYS:g} MB: "
          f"{'met' if total <= TARGET_MB_PER_30_DAYS else 'MISSED'}")


def main() -> None:
    """Parse arguments and run."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", type=int, default=2)
    parser.add_argument("--hours", type=float, default=24.0)
    run(parser.parse_args())


if __name__ == "__main__":
    main()
