"""Benchmark: a soak of the whole stack (gunicorn, Redis broker, Celery workers, PostgreSQL).

Not a test. A simulated fleet (``--hosts`` hosts from the ingest generator: real
argv, full real 45-54 KB ``/metrics`` bodies, two GPUs) reports at ``--rate`` reports/s for
``--minutes`` minutes, each host every ``hosts / rate`` seconds, through gunicorn serving the
real API; Celery workers derive and evaluate every report (``audit.tasks.evaluate_report``).
On a dedicated database (``fleet_bench_soak``) and the benchmarks' Redis db. Hosts and
their tokens are bulk-inserted (10,000 in seconds), not enrolled over HTTP.

A large fleet at a rate the machine can take (``--hosts 10000 --rate 8``: each host every
1,250 s) means that in 10 minutes (4,800 reports) a host reports once at most: every report
is a first one (servers, GPUs and change events created, the raw report kept), heavier than
the steady state, so the per-core figures are conservative; the run prints how many reports
were a host's first.

Printed at the end:

* accepted (202) against stored rows, and reports left underived or unevaluated after the
  drain: "nothing lost" is 0 / 0;
* the evaluate queue's depth, sampled every 5 s (bounded when the workers keep up);
* report -> finding latency (``evaluated_at - received_at``: stored to findings written),
  p50 / p99;
* the database per host after pruning the unchanged raw reports, extrapolated to 30 days
  at the agent's 30 s interval (bytes per row as measured, rows per host as the retention
  keeps them: full resolution for ``SAMPLE_FULL_RESOLUTION_HOURS``, then hourly);
* CPU seconds of each tier from ``/proc``: gunicorn and Celery (process trees, reaped
  children included), and PostgreSQL: every backend of this database, found by its process
  title (``postgres: user database ...``) every second, so a backend recycled by
  ``CONN_MAX_AGE`` counts up to its last sample; the whole postmaster's delta (every
  database, WAL writer, checkpointer: an upper bound on a shared machine) is printed too;
* what one core of each tier carries in reports/s, and the sizing table of a 10,000-host
  fleet at a 30 s interval (333 reports/s).

With ``--steady-minutes M`` the run has two phases: a warm-up in which every host sends its
first report (``hosts / rate`` seconds, drained, not measured) and a steady phase of M
minutes (every report a host's later one: nothing changed but metrics), which alone the
figures above describe ("steady phase only"); a steady soak on a quiet machine runs at
least 15 minutes.

Run: ``.venv/bin/python bench/soak.py [--minutes 10 --rate 8 --hosts 240 --web-workers 2
--worker-concurrency 2]``; the 10,000-host soak: ``--hosts 10000 --rate 8``; steady:
``--hosts 240 --rate 8 --steady-minutes 15``.
"""

from __future__ import annotations

import argparse
import math
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
    table_bytes,
    wait_for_vacuum_horizon,
)

AGENT_INTERVAL_S = 30  # fleet_agent's default report interval
FLEET_HOSTS = 10_000
FLEET_REPORTS_PER_S = FLEET_HOSTS / AGENT_INTERVAL_S  # 333 reports/s
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
    """Pids of PostgreSQL backends (and autovacuum workers) serving ``database`` now, from
    their process titles (``postgres: <user> <database> <client> <state>``); no query, so
    a connection that lives under a second is still seen when it is sampled."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            title = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        words = title.split()
        if words[:1] == ["postgres:"] and database in words[1:5]:  # after a cluster name
            out.append(int(entry.name))
    return out


def postmaster_pid() -> int:
    """The postmaster: the parent of this process's own backend."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = cursor.fetchone()[0]
    return int(Path(f"/proc/{backend}/stat").read_text().rsplit(")", 1)[1].split()[1])


def drive(port: int, hosts: list[tuple[str, str, str]], rate: float, seconds: float,
          threads: int, first_k: int = 0, form: str = "text") -> tuple[int, int]:
    """Send reports round-robin over ``hosts`` at ``rate``/s for ``seconds``, dated now,
    numbered from ``first_k`` (report ``k`` is host ``k % hosts``' cycle ``k // hosts``).
    ``form`` ``compact``: newer agents (text and numbers on a host's first cycle, numbers
    after); ``text``: older agents.

    Returns ``(sent, accepted)``. ``threads`` client threads share one schedule, so a slow
    answer delays only its own thread.
    """
    fleet, lock = Fleet(), threading.Lock()
    state = {"next": first_k, "sent": 0, "accepted": 0}
    start = time.monotonic()

    def client() -> None:
        while True:
            with lock:
                k = state["next"]
                state["next"] += 1
            due = start + (k - first_k) / rate
            if due - start >= seconds:
                return
            time.sleep(max(0.0, due - time.monotonic()))
            machine_id, hostname, token = hosts[k % len(hosts)]
            cycle = k // len(hosts)
            metrics_form = ("both" if cycle == 0 else "compact") if form == "compact" else form
            body = gzip_json(realistic_report(fleet, k % len(hosts), machine_id, hostname,
                                              datetime.now(UTC), metrics_form=metrics_form,
                                              step=cycle))
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


def sample(stop: threading.Event, depths: list[int], database: str,
           pg_cpu: dict[int, float]) -> None:
    """Until ``stop``: every second note the CPU seconds of each PostgreSQL backend of
    ``database`` (a backend that exits between two samples counts with its last one: at
    most a second of its CPU is lost); every 5 s append the evaluate queue's depth."""
    tick = 0
    while not stop.wait(1):
        for pid in backend_pids(database):
            pg_cpu[pid] = cpu_seconds([pid])
        tick += 1
        if tick % 5 == 0:
            depths.append(queue_depth())


def drain(limit_s: float) -> float:
    """Wait until every stored report is evaluated (or ``limit_s``); returns seconds waited."""
    from fleet.models import Report

    start = time.monotonic()
    while time.monotonic() - start < limit_s:
        if not Report.objects.filter(evaluated_at=None).exists():
            break
        time.sleep(1)
    return time.monotonic() - start


def storage_per_host_30_days() -> tuple[float, float]:
    """``(MB per reporting host now after pruning unchanged raw reports, MB per host over
    30 days at the agent's 30 s interval)``.

    30 days = samples per report (servers, GPUs) x 120 reports/h for
    ``SAMPLE_FULL_RESOLUTION_HOURS``, then one per server or GPU per hour until
    ``SAMPLE_RETENTION_DAYS`` (30 by default), at the bytes per row measured (a small table
    is mostly page and index overhead, so this overstates; empty partitions are left out);
    plus what is not time-series
    (kept reports, inventory, findings) per host that reported, as measured.
    """
    from django.conf import settings
    from django.db import connection
    from django.utils import timezone

    from fleet.models import Report, Server
    from fleet.tasks import prune_reports

    reports = Report.objects.count()
    hosts = Server.objects.values("host_id").distinct().count() or 1
    later = timezone.now() + timedelta(minutes=settings.REPORT_RAW_RETENTION_MINUTES + 1)
    with mock.patch("fleet.tasks.timezone.now", return_value=later):
        prune_reports()
    if not wait_for_vacuum_horizon():
        print("(other sessions kept transactions open for 2 min: sizes include dead rows)")
    sizes = {}
    with connection.cursor() as cursor:
        for table in ("fleet_metricsample", "fleet_gpusample", "fleet_report", "fleet_server",
                      "fleet_gpu", "fleet_host", "fleet_agenttoken", "fleet_changeevent",
                      "audit_finding", "audit_findingevent", "audit_serverauditstate"):
            cursor.execute(f"VACUUM FULL {table}")  # names are the constants above
            # Per partition: the empty ones (days ahead, DEFAULT) are a fixed few index
            # pages each, not bytes per row; only partitions holding rows count.
            cursor.execute(f"SELECT tableoid::regclass::text, count(*) FROM {table} "  # noqa: S608
                           "GROUP BY 1")
            held = cursor.fetchall()
            sizes[table] = (sum(n for _, n in held),
                            sum(table_bytes(cursor, part) for part, _ in held))
    series = ("fleet_metricsample", "fleet_gpusample")
    now_mb = sum(size for _, size in sizes.values()) / MB / hosts
    total = sum(size for t, (_, size) in sizes.items() if t not in series) / MB / hosts
    window_h = settings.SAMPLE_FULL_RESOLUTION_HOURS
    days = settings.SAMPLE_RETENTION_DAYS
    for table in series:
        rows, size = sizes[table]
        per_row = size / rows if rows else 0
        per_report = rows / reports if reports else 0  # 1 per server, 1 per GPU
        total += per_report * 3600 / AGENT_INTERVAL_S * window_h * per_row / MB
        total += per_report * 24 * (days - window_h / 24) * per_row / MB
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
        enroll_start = time.monotonic()
        hosts = enroll_hosts(args.hosts, prefix="soak")
        print(f"enrolled {len(hosts)} hosts with their tokens in "
              f"{time.monotonic() - enroll_start:.1f} s (bulk insert)")
        seconds = args.minutes * 60
        minutes = args.steady_minutes or args.minutes
        print(f"{args.hosts} hosts, {args.rate:g} reports/s (each host every "
              f"{args.hosts / args.rate:.0f} s) for {minutes:g} min"
              f"{' after a warm-up' if args.steady_minutes else ''}; "
              f"{args.web_workers} gunicorn workers, {args.worker_concurrency} Celery processes")
        with Gunicorn(env, args.web_workers) as web, \
                celery_worker(env, args.worker_concurrency) as worker:
            time.sleep(3)  # the worker's boot
            web_pids, worker_pids = tree(web.proc.pid), tree(worker.pid)
            cpu0 = (cpu_seconds(web_pids), cpu_seconds(worker_pids))
            postmaster = postmaster_pid()
            pg0 = {pid: cpu_seconds([pid]) for pid in backend_pids(database)}
            postmaster0 = cpu_seconds(tree(postmaster))
            depths: list[int] = []
            stop = threading.Event()
            pg_seen: dict[int, float] = dict(pg0)
            sampler = threading.Thread(target=sample, args=(stop, depths, database, pg_seen))
            sampler.start()
            if args.steady_minutes:  # warm-up: every host's first report, then measure anew
                warm_s = len(hosts) / args.rate
                print(f"warm-up: {len(hosts)} first reports in {warm_s:.0f} s")
                drive(web.port, hosts, args.rate, warm_s, args.threads, 0, args.metrics_form)
                drain(300)
                steady_from = datetime.now(UTC)
                depths.clear()
                cpu0 = (cpu_seconds(tree(web.proc.pid)), cpu_seconds(tree(worker.pid)))
                pg0 = {pid: cpu_seconds([pid]) for pid in backend_pids(database)}
                pg_seen.clear()
                pg_seen.update(pg0)
                postmaster0 = cpu_seconds(tree(postmaster))
                seconds = args.steady_minutes * 60
                print(f"steady phase: {args.steady_minutes:g} min")
            else:
                steady_from = None
            sent, accepted = drive(web.port, hosts, args.rate, seconds, args.threads,
                                   len(hosts) if steady_from else 0, args.metrics_form)
            waited = drain(120)
            stop.set()
            sampler.join()
            for pid in backend_pids(database):
                pg_seen[pid] = cpu_seconds([pid])
            web_cpu = cpu_seconds(tree(web.proc.pid)) - cpu0[0]
            worker_cpu = cpu_seconds(tree(worker.pid)) - cpu0[1]
            pg_cpu = sum(cpu - pg0.get(pid, 0.0) for pid, cpu in pg_seen.items())
            postmaster_cpu = cpu_seconds(tree(postmaster)) - postmaster0
            load = os.getloadavg()[0]
        phase = Report.objects.filter(received_at__gte=steady_from) if steady_from \
            else Report.objects.all()
        stored = phase.count()
        first = (0 if steady_from else  # the warm-up took every host's first report
                 Report.objects.values("host_id").distinct().count())
        underived = Report.objects.filter(derived_at=None).count()
        unevaluated = Report.objects.filter(evaluated_at=None).count()
        timed = [(r.received_at, (r.evaluated_at - r.received_at).total_seconds()) for r in
                 phase.exclude(evaluated_at=None).only("evaluated_at", "received_at")]
        latencies = [took for _, took in timed]
        # the warm-up's own backlog (its configuration plans) can still be draining at first
        settled = min((at for at, _ in timed), default=None)
        later = [took for at, took in timed if at >= settled + timedelta(minutes=2)]
        now_mb, month_mb = storage_per_host_30_days()
        flush_redis()
    lost = stored != accepted or unevaluated or underived
    print(f"sent {sent}, accepted (202) {accepted}, stored {stored}, left underived "
          f"{underived}, unevaluated {unevaluated} after a {waited:.0f} s drain: "
          f"{'LOST REPORTS' if lost else 'nothing lost'}; {first} of the reports were a "
          f"host's first (inventory created); load average {load:.2f} at the end")
    print(f"evaluate queue depth every 5 s: max {max(depths, default=0)}, last "
          f"{depths[-1] if depths else 0} ({len(depths)} samples); max per minute: "
          f"{[max(depths[i:i + 12]) for i in range(0, len(depths), 12)]}")
    print(f"report -> finding (evaluated_at - received_at): p50 "
          f"{percentile(latencies, 50):.2f} s, p99 {percentile(latencies, 99):.2f} s "
          f"(target p99 < 2 s); after the first 2 minutes: p99 "
          f"{percentile(later, 99):.2f} s ({len(later)} reports)")
    print(f"database: {now_mb:.3f} MB per reporting host after the soak and the raw prune; "
          f"{month_mb:.2f} MB per host over 30 days at {AGENT_INTERVAL_S} s (target <= 5 MB)")
    print(f"PostgreSQL, whole postmaster (every database on this server, WAL writer, "
          f"checkpointer; an upper bound on a shared machine): {postmaster_cpu:.1f} CPU s")
    tiers = (("web (gunicorn)", web_cpu), ("worker (derive + evaluate)", worker_cpu),
             ("PostgreSQL (this database)", pg_cpu))
    print(f"\n| tier | CPU s | reports/s per core | cores for {FLEET_HOSTS:,} hosts at "
          f"{AGENT_INTERVAL_S} s ({FLEET_REPORTS_PER_S:.0f} reports/s) |\n|---|---|---|---|")
    cores = {}
    for name, cpu in tiers:
        per_core = accepted / cpu if cpu else float("inf")
        cores[name] = FLEET_REPORTS_PER_S / per_core
        print(f"| {name} | {cpu:.1f} | {per_core:.1f} | {cores[name]:.1f} |")
    total_ms = sum(cpu for _, cpu in tiers) / accepted * 1000 if accepted else float("nan")
    print(f"\nCPU per report, all three tiers: {total_ms:.2f} ms -> "
          f"{FLEET_REPORTS_PER_S * total_ms / 1000:.2f} cores for {FLEET_HOSTS:,} hosts at "
          f"{AGENT_INTERVAL_S} s" + (" (steady phase only)" if steady_from else ""))
    web_n, worker_n, pg_n = (math.ceil(c) for c in cores.values())
    disk_gb = month_mb * FLEET_HOSTS / 1000
    print(f"\nSizing: {FLEET_HOSTS:,} hosts at {AGENT_INTERVAL_S} s need {web_n} web cores, "
          f"{worker_n} worker cores, PostgreSQL with {pg_n} cores and {disk_gb:.0f} GB for "
          f"30 days of data (this machine's per-core figures; no headroom added)")
    return 1 if lost else 0


def main() -> int:
    """Parse arguments and run."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=8.0, help="reports per second")
    parser.add_argument("--hosts", type=int, default=240)
    parser.add_argument("--threads", type=int, default=8, help="client threads")
    parser.add_argument("--web-workers", type=int, default=2)
    parser.add_argument("--worker-concurrency", type=int, default=2)
    parser.add_argument("--steady-minutes", type=float, default=0.0,
                        help="warm up (every host's first report, not measured), then "
                             "measure this many minutes of steady reports instead of "
                             "--minutes")
    parser.add_argument("--metrics-form", choices=("compact", "text"), default="compact",
                        help="compact: newer agents; text: older agents (raw body)")
    return run(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
