"""Benchmark: a soak of the whole stack (gunicorn, Redis broker, Celery workers, PostgreSQL).

Not a test (issue 14). A simulated fleet (``--hosts`` hosts from the ingest generator: real
argv, full real 45-54 KB ``/metrics`` bodies, two GPUs) reports at ``--rate`` reports/s for
``--minutes`` minutes, each host every ``hosts / rate`` seconds, through gunicorn serving the
real API; Celery workers derive and evaluate every report (``audit.tasks.evaluate_report``).
On a dedicated database (``fleet_bench_soak``) and the benchmarks' Redis db.

Printed at the end:

* accepted (202) against stored rows, and reports left underived or unevaluated after the
  drain: "nothing lost" is 0 / 0;
* the evaluate queue's depth, sampled every 5 s (bounded when the workers keep up);
* report -> finding latency (``evaluated_at - received_at``: stored to findings written),
  p50 / p99;
* the database per host after pruning the unchanged raw reports, extrapolated to 30 days
  (the same arithmetic as ``bench/storage.py``);
* CPU seconds of each tier (gunicorn, Celery workers, this database's PostgreSQL backends,
  from ``/proc``) and what one core of each tier carries in reports/s, with the cores a
  10,000-host fleet at a 30 s interval (333 reports/s) needs.

Run: ``.venv/bin/python bench/soak.py [--minutes 10 --rate 8 --hosts 240 --web-workers 2
--worker-concurrency 2]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    REDIS_URL,
    Fleet,
    Gunicorn,
    bench_database,
    bench_env,
    celery_worker,
    enroll_hosts,
    flush_redis,
    gzip_json,
    machine_note,
    percentile,
    post_one,
    realistic_report,
    setup_django,
)

FLEET_REPORTS_PER_S = 10_000 / 30  # 10,000 hosts at the agent's 30 s interval
CLK_TCK = os.sysconf("SC_CLK_TCK")
MB = 1_000_000


def cpu_seconds(pids: list[int]) -> float:
    """utime + stime of ``pids`` and their reaped children, from /proc (0 for gone ones)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(v) for v in fields[11:15])  # utime stime cutime cstime
    return total / CLK_TCK


def tree(root: int) -> list[int]:
    """``root`` and every descendant pid (gunicorn workers, Celery pool processes)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def backend_pids(database: str) -> list[int]:
    """PostgreSQL backend pids serving ``database`` now."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s", [database])
        return [row[0] for row in cursor.fetchall()]


def drive(port: int, hosts: list[tuple[str, str, str]], rate: float, seconds: float,
          threads: int) -> tuple[int, int]:
    """Send reports round-robin over ``hosts`` at ``rate``/s for ``seconds``, dated now.

    Returns ``(sent, accepted)``. ``threads`` client threads share one schedule, so a slow
    answer delays only its own thread.
    """
    fleet, lock = Fleet(), threading.Lock()
    state = {"next": 0, "sent": 0, "accepted": 0}
    start = time.monotonic()

    def client() -> None:
        while True:
            with lock:
                k = state["next"]
                state["next"] += 1
            due = start + k / rate
            if due - start >= seconds:
                return
            time.sleep(max(0.0, due - time.monotonic()))
            machine_id, hostname, token = hosts[k % len(hosts)]
            body = gzip_json(realistic_report(fleet, k % len(hosts), machine_id, hostname,
                                              datetime.now(UTC)))
            status = post_one(port, "/api/v1/reports", body, token)
            with lock:
                state["sent"] += 1
                state["accepted"] += status == 202

    pool = [threading.Thread(target=client) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return state["sent"], state["accepted"]


def queue_depth() -> int:
    """Messages waiting on the evaluate queue (kombu's Redis list named after the queue)."""
    import redis

    return redis.Redis.from_url(REDIS_URL).llen("evaluate")


def sample_queue(stop: threading.Event, depths: list[int], database: str,
                 pg_cpu: dict[int, float]) -> None:
    """Every 5 s until ``stop``: append the evaluate queue's depth, and note the CPU seconds
    of each PostgreSQL backend of ``database`` (a backend that exits between two samples,
    e.g. a recycled connection, counts with its last sample)."""
    from django.db import connection

    while not stop.wait(5):
        depths.append(queue_depth())
        for pid in backend_pids(database):
            pg_cpu[pid] = cpu_seconds([pid])
    connection.close()


def drain(limit_s: float) -> float:
    """Wait until every stored report is evaluated (or ``limit_s``); returns seconds waited."""
    from fleet.models import Report

    start = time.monotonic()
    while time.monotonic() - start < limit_s:
        if not Report.objects.filter(evaluated_at=None).exists():
            break
        time.sleep(1)
    return time.monotonic() - start


def storage_per_host_30_days(hosts: int, minutes: float) -> tuple[float, float]:
    """``(MB per host now after pruning unchanged raw reports, MB per host over 30 days)``.

    30 days = full-resolution samples for ``SAMPLE_FULL_RESOLUTION_HOURS`` + one sample per hour
    for the rest + what is not time-series (kept reports, inventory) as measured.
    """
    from django.conf import settings
    from django.db import connection
    from django.utils import timezone

    from fleet.tasks import prune_reports

    later = timezone.now() + timedelta(minutes=settings.REPORT_RAW_RETENTION_MINUTES + 1)
    with mock.patch("fleet.tasks.timezone.now", return_value=later):
        prune_reports()
    sizes = {}
    with connection.cursor() as cursor:
        for table in ("fleet_metricsample", "fleet_gpusample", "fleet_report", "fleet_server",
                      "fleet_gpu", "fleet_host", "fleet_changeevent", "audit_finding",
                      "audit_findingevent", "audit_serverauditstate"):
            cursor.execute(f"VACUUM FULL {table}")  # names are the constants above
            cursor.execute(f"SELECT count(*), pg_total_relation_size('{table}') "  # noqa: S608
                           f"FROM {table}")
            sizes[table] = cursor.fetchone()
    series = ("fleet_metricsample", "fleet_gpusample")
    now_mb = sum(size for _, size in sizes.values()) / MB / hosts
    fixed = sum(size for t, (_, size) in sizes.items() if t not in series) / MB / hosts
    window_h = settings.SAMPLE_FULL_RESOLUTION_HOURS
    total = fixed
    for table in series:
        rows, size = sizes[table]
        per_row = size / rows if rows else 0
        per_host_minute = rows / hosts / minutes
        total += per_host_minute * 60 * window_h * per_row / MB  # full resolution
        rows_per_hour = min(per_host_minute * 60, 2.0)  # 1 per server or GPU per hour
        total += rows_per_hour * 24 * (30 - window_h / 24) * per_row / MB
    return now_mb, total


def run(args: argparse.Namespace) -> int:
    """Soak, drain, print the figures; 1 when a report was lost."""
    print(f"soak on {machine_note()}")
    with bench_database("fleet_bench_soak") as db_url:
        env = bench_env(db_url)
        setup_django(env)
        flush_redis()
        from django.conf import settings

        from fleet.models import Report

        database = settings.DATABASES["default"]["NAME"]
        hosts = enroll_hosts(args.hosts, prefix="soak")
        seconds = args.minutes * 60
        print(f"{args.hosts} hosts, {args.rate:g} reports/s (each host every "
              f"{args.hosts / args.rate:.0f} s) for {args.minutes:g} min; "
              f"{args.web_workers} gunicorn workers, {args.worker_concurrency} Celery processes")
        with Gunicorn(env, args.web_workers) as web, \
                celery_worker(env, args.worker_concurrency) as worker:
            time.sleep(3)  # the worker's boot
            web_pids, worker_pids = tree(web.proc.pid), tree(worker.pid)
            cpu0 = (cpu_seconds(web_pids), cpu_seconds(worker_pids))
            depths: list[int] = []
            stop = threading.Event()
            pg_seen: dict[int, float] = {}
            sampler = threading.Thread(target=sample_queue,
                                       args=(stop, depths, database, pg_seen))
            sampler.start()
            sent, accepted = drive(web.port, hosts, args.rate, seconds, args.threads)
            waited = drain(120)
            stop.set()
            sampler.join()
            for pid in backend_pids(database):
                pg_seen[pid] = cpu_seconds([pid])
            web_cpu = cpu_seconds(tree(web.proc.pid)) - cpu0[0]
            worker_cpu = cpu_seconds(tree(worker.pid)) - cpu0[1]
            pg_cpu = sum(pg_seen.values())
        stored = Report.objects.count()
        underived = Report.objects.filter(derived_at=None).count()
        unevaluated = Report.objects.filter(evaluated_at=None).count()
        latencies = [(r.evaluated_at - r.received_at).total_seconds() for r in
                     Report.objects.exclude(evaluated_at=None).only("evaluated_at", "received_at")]
        now_mb, month_mb = storage_per_host_30_days(args.hosts, args.minutes)
        flush_redis()
    print(f"sent {sent}, accepted (202) {accepted}, stored {stored}, left underived "
          f"{underived}, unevaluated {unevaluated} after a {waited:.0f} s drain: "
          f"{'nothing lost' if stored == accepted and not unevaluated else 'LOST REPORTS'}")
    print(f"evaluate queue depth every 5 s: max {max(depths, default=0)}, last "
          f"{depths[-1] if depths else 0} ({len(depths)} samples)")
    print(f"report -> finding (evaluated_at - received_at): p50 "
          f"{percentile(latencies, 50):.2f} s, p99 {percentile(latencies, 99):.2f} s "
          f"(target p99 < 2 s)")
    print(f"database: {now_mb:.3f} MB per host after the soak and the raw prune; "
          f"{month_mb:.2f} MB per host over 30 days (target <= 5 MB)")
    print("tier        CPU s   reports/s per core   cores for 10,000 hosts at 30 s")
    for name, cpu in (("web", web_cpu), ("worker", worker_cpu), ("postgres", pg_cpu)):
        per_core = accepted / cpu if cpu else float("inf")
        print(f"{name:<10} {cpu:7.1f}   {per_core:10.1f}           "
              f"{FLEET_REPORTS_PER_S / per_core:6.1f}")
    return 0 if stored == accepted and not unevaluated else 1


def main() -> int:
    """Parse arguments and run."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=8.0, help="reports per second")
    parser.add_argument("--hosts", type=int, default=240)
    parser.add_argument("--threads", type=int, default=8, help="client threads")
    parser.add_argument("--web-workers", type=int, default=2)
    parser.add_argument("--worker-concurrency", type=int, default=2)
    return run(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
