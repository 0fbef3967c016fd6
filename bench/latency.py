"""Benchmark: report-to-finding latency (p50/p99) with one Celery worker at half its load.

Not a test. Target: p99 under 1 s.

Real processes on a dedicated database (``fleet_bench_latency``) and Redis db 11: gunicorn
serving the product (2 sync workers) and one Celery worker (``--concurrency 1``, all queues).
Every report is a new host's first report, so each one runs config and metric rules and
opens findings: the slowest evaluation path, the one that matters when a risky change lands.

1. Sustainable load: a burst of ``--burst`` reports is posted at once; the worker's
   evaluation rate is the number of reports over the time from the first post to the last
   ``evaluated_at``.
2. Latency: ``--reports`` reports are posted at half that rate, evenly spaced; a report's
   latency is its ``evaluated_at`` (set in the transaction that writes its findings) minus
   the moment the client started sending it. Same machine, same clock.

Baseline measured in the same run: the HTTP round trip of the POST alone (202 answered),
which every report pays before any evaluation can start.

Run: ``.venv/bin/python bench/latency.py [--burst 60 --reports 120]``.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    Fleet,
    Gunicorn,
    bench_database,
    bench_env,
    celery_worker,
    enroll_hosts,
    flush_redis,
    gzip_json,
    machine_note,
    median,
    percentile,
    post_one,
    realistic_report,
    setup_django,
)

TARGET_P99_S = 1.0  # report-to-finding p99 under 1 s
DRAIN_TIMEOUT_S = 300


def make_jobs(fleet: Fleet, hosts: list[tuple[str, str, str]]) -> list[tuple[str, bytes, str]]:
    """``(report_id, gzip body, token)``: each host's first report, collected now."""
    jobs = []
    for index, (machine_id, hostname, token) in enumerate(hosts):
        report = realistic_report(fleet, index, machine_id, hostname, datetime.now(UTC))
        jobs.append((report["report_id"], gzip_json(report), token))
    return jobs


def evaluated_at(report_ids: list[str]) -> dict[str, float]:
    """``report_id -> evaluated_at`` (epoch seconds) of the reports evaluated so far."""
    from fleet.models import Report

    rows = Report.objects.filter(report_id__in=report_ids, evaluated_at__isnull=False)
    return {str(r): at.timestamp() for r, at in rows.values_list("report_id", "evaluated_at")}


def wait_evaluated(report_ids: list[str]) -> dict[str, float]:
    """Poll until every report is evaluated (or the drain timeout passes)."""
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    done: dict[str, float] = {}
    while time.monotonic() < deadline:
        done = evaluated_at(report_ids)
        if len(done) == len(report_ids):
            break
        time.sleep(0.25)
    return done


def paced_post(port: int, jobs: list[tuple[str, bytes, str]],
               rate: float) -> tuple[dict[str, float], list[float]]:
    """Post ``jobs`` at ``rate``/s (one thread per report, started on schedule).

    Returns ``(report_id -> send epoch, POST round-trip seconds)``.
    """
    sent: dict[str, float] = {}
    round_trips: list[float] = []
    lock = threading.Lock()

    def send(report_id: str, body: bytes, token: str) -> None:
        start_epoch, start = time.time(), time.perf_counter()
        status = post_one(port, "/api/v1/reports", body, token)
        with lock:
            sent[report_id] = start_epoch
            if status == 202:
                round_trips.append(time.perf_counter() - start)

    threads = []
    t0 = time.perf_counter()
    for k, job in enumerate(jobs):
        time.sleep(max(0.0, t0 + k / rate - time.perf_counter()))
        thread = threading.Thread(target=send, args=job)
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join()
    return sent, round_trips


def sustainable_rate(port: int, jobs: list[tuple[str, bytes, str]]) -> float:
    """Reports/s one worker evaluates when a burst of first reports arrives at once."""
    sent, _ = paced_post(port, jobs, rate=1000.0)
    done = wait_evaluated([j[0] for j in jobs])
    if len(done) < len(jobs):
        raise RuntimeError(f"only {len(done)} of {len(jobs)} burst reports were evaluated")
    return len(jobs) / (max(done.values()) - min(sent.values()))


def run(args: argparse.Namespace) -> None:
    """Measure the sustainable rate, then latency at half of it; print the figures."""
    print(f"latency benchmark on {machine_note()}")
    with bench_database("fleet_bench_latency") as db_url:
        env = bench_env(db_url)
        setup_django(env)
        from audit.models import Finding

        flush_redis()
        fleet = Fleet()
        burst = make_jobs(fleet, enroll_hosts(args.burst, prefix="burst"))
        with Gunicorn(env, workers=2) as server, celery_worker(env, concurrency=1):
            time.sleep(3)  # let the worker connect before the burst
            rate = sustainable_rate(server.port, burst)
            print(f"  sustainable: one worker evaluates {rate:.1f} first reports/s "
                  f"(burst of {len(burst)})")
            jobs = make_jobs(fleet, enroll_hosts(args.reports, prefix="paced"))
            sent, round_trips = paced_post(server.port, jobs, rate / 2)
            done = wait_evaluated([j[0] for j in jobs])
        latencies = [done[r] - sent[r] for r in sent if r in done]
        findings = Finding.objects.filter(host__machine_id__startswith="paced").count()
        report(rate, latencies, round_trips, len(jobs), findings)
        flush_redis()


def report(rate: float, latencies: list[float], round_trips: list[float], sent: int,
           findings: int) -> None:
    """Print p50/p99 against the target and the POST-only baseline."""
    p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
    base50, base99 = percentile(round_trips, 50), percentile(round_trips, 99)
    print(f"  at {rate / 2:.1f} reports/s: {len(latencies)} of {sent} evaluated, "
          f"{findings} findings opened")
    print(f"  report-to-finding p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms "
          f"(target p99 < {TARGET_P99_S * 1000:.0f} ms: "
          f"{'met' if p99 < TARGET_P99_S else 'MISSED'}); max {max(latencies) * 1000:.0f} ms")
    print(f"  baseline: POST round trip alone p50 {base50 * 1000:.0f} ms, p99 "
          f"{base99 * 1000:.0f} ms; the ratio p50 {p50 / base50:.1f}x, p99 {p99 / base99:.1f}x;"
          f" median evaluation share {(median(latencies) - base50) * 1000:.0f} ms")


def main() -> None:
    """Parse arguments and run."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--burst", type=int, default=60)
    parser.add_argument("--reports", type=int, default=120)
    run(parser.parse_args())


if __name__ == "__main__":
    main()
