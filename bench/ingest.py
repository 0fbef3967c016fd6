"""Benchmark: ingest throughput (reports/s accepted and stored) against a bare Django baseline.

Not a test. Targets: at least 0.7x the baseline and at least 300 reports/s (a 10,000-host
fleet at a 30 s interval sends 333/s).

One run, on a dedicated PostgreSQL database (``fleet_bench_ingest``, dropped at the end)
and Redis db 11:

* the product: gunicorn serving ``config.wsgi`` (the real ninja API: bearer token, rate
  limiter in Redis with the limit lifted, gzip body, contract validation, host lock, Report
  insert, GPU/server upserts, MetricSample from the full /metrics body, evaluation enqueued
  on Redis after commit; no worker runs, so the queue only grows);
* the product on the steady lane ("lane"): the same API for hosts whose lane the worker
  opened (their first reports were derived and evaluated in this process before the
  trials), so each later report is applied in the request (``fleet.lane``: report row,
  samples, readings in one statement) and not queued. ``AUDIT_METRICS_INTERVAL_S`` and
  ``AUDIT_FINDING_SEEN_REFRESH_S`` are set to a day in this run so that no worker is needed
  to keep the lanes open (in a fleet one report in ten is also queued for its metric rules);
* the baseline: gunicorn with the same settings and worker count serving
  ``bench/baseline_app`` (gzip body, ``json.loads``, one jsonb INSERT).

Both get the same gzip bodies: realistic reports (real argv from ``demo/data/cases/reports``,
/metrics of vLLM 0.11-0.29 from ``demo/data/cases/metrics``: by default as newer agents send
it, the compact numbers with the 45-54 KB text on a host's first report only;
``--metrics-form text``: the full text every report, as older agents do; two GPUs), one host
per token. Trials alternate baseline/product; the medians and their ratio
are printed. After the run, the stored row counts are checked against the 202/201 counts.

Run: ``.venv/bin/python bench/ingest.py [--hosts 64 --reports 640 --threads 8 --workers 4
--repeats 3]`` (PostgreSQL on 127.0.0.1:5432, Redis on 127.0.0.1:6379).
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    Fleet,
    Gunicorn,
    PostResult,
    bench_database,
    bench_env,
    create_baseline_table,
    enroll_hosts,
    flush_redis,
    gzip_json,
    machine_note,
    median,
    post_all,
    realistic_report,
    setup_django,
)

TARGET_RATIO = 0.70  # >= 70% of the bare-view baseline
TARGET_RATE = 300.0  # >= 300 reports/s (10,000 hosts / 30 s = 333/s)
REPORT_INTERVAL_S = 30  # agent default interval (fleet_agent config), spacing of collected_at


def build_jobs(fleet: Fleet, hosts: list[tuple[str, str, str]], count: int,
               first_seq: int, start: datetime,
               with_metrics: bool = True, metrics_form: str = "text") -> list[tuple[bytes, str]]:
    """``count`` gzip bodies round-robin over ``hosts`` with increasing collected_at.

    Job ``k`` belongs to host ``k % len(hosts)``; with ``len(hosts)`` a multiple of the
    client thread count each host's reports go through one thread, in order.
    """
    jobs = []
    for k in range(count):
        index = k % len(hosts)
        machine_id, hostname, token = hosts[index]
        seq = first_seq + k // len(hosts)
        at = start + timedelta(seconds=seq * REPORT_INTERVAL_S)
        form = "both" if metrics_form == "compact" and seq == 0 else metrics_form
        report = realistic_report(fleet, index, machine_id, hostname, at,
                                  with_metrics=with_metrics, metrics_form=form, step=seq)
        jobs.append((gzip_json(report), token))
    return jobs


def stored_counts() -> tuple[int, int]:
    """(product Report rows, baseline rows) in the bench database."""
    from django.db import connection

    from fleet.models import Report

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM bench_baseline_report")
        baseline = cursor.fetchone()[0]
    return Report.objects.count(), baseline


def show(label: str, result: PostResult) -> None:
    """One trial line: rate, status counts, median client latency."""
    print(f"  {label:<9} {result.rate:7.1f} reports/s  ({result.accepted} accepted in "
          f"{result.elapsed_s:5.2f} s, statuses {dict(result.statuses)}, median request "
          f"{median(result.latencies_s) * 1000:6.1f} ms)")


def run(args: argparse.Namespace) -> int:
    """Run the alternating trials; returns the process exit status (1 on lost reports)."""
    print(f"ingest benchmark on {machine_note()}")
    with bench_database("fleet_bench_ingest") as db_url:
        # A day between metric-rule evaluations: the lanes stay open without a worker.
        env = bench_env(db_url, AUDIT_METRICS_INTERVAL_S="86400",
                        AUDIT_FINDING_SEEN_REFRESH_S="86400")
        setup_django(env)
        create_baseline_table()
        flush_redis()
        hosts = {"product": enroll_hosts(args.hosts),
                 "no-metrics": enroll_hosts(args.hosts, prefix="bare"),
                 "lane": enroll_hosts(args.hosts, prefix="lane")}
        fleet = Fleet()
        start = datetime.now(UTC) - timedelta(days=2)
        per_trial = args.reports // args.hosts
        form = args.metrics_form
        warm = {label: build_jobs(fleet, hosts[label], args.hosts * 2, 0, start,
                                  label != "no-metrics", form) for label in hosts}
        print(f"report: {len(warm['product'][-1][0])} bytes gzipped ("
              f"{len(warm['no-metrics'][-1][0])} without /metrics); {args.hosts} hosts, "
              f"{args.threads} client threads, {args.workers} gunicorn sync workers per server")
        with Gunicorn(env, args.workers) as product, \
                Gunicorn(env, args.workers, baseline=True) as baseline:
            targets = {"baseline": (baseline.port, "/baseline/reports", "product"),
                       "product": (product.port, "/api/v1/reports", "product"),
                       "no-metrics": (product.port, "/api/v1/reports", "no-metrics"),
                       "lane": (product.port, "/api/v1/reports", "lane")}
            for port, path, kind in targets.values():
                post_all(port, path, warm[kind], args.threads)
            open_lanes("lane")
            rates: dict[str, list[float]] = {label: [] for label in targets}
            accepted = dict.fromkeys(targets, 0)
            for trial in range(args.repeats):
                seq = 2 + trial * per_trial
                jobs = {kind: build_jobs(fleet, hosts[kind], per_trial * args.hosts, seq, start,
                                         kind != "no-metrics", form) for kind in hosts}
                for label, (port, path, kind) in targets.items():
                    result = post_all(port, path, jobs[kind], args.threads)
                    show(label, result)
                    rates[label].append(result.rate)
                    accepted[label] += result.accepted
        flush_redis()
        return summarise(rates, accepted, args.hosts * 2)


def open_lanes(prefix: str) -> int:
    """Run the worker's task (derive, evaluate, arm the steady lane) in this process on the
    unevaluated reports of the hosts whose machine id starts with ``prefix``, oldest first;
    returns how many lanes are open."""
    from audit.tasks import evaluate_report
    from fleet.models import Report, SteadyLane

    pending = (Report.objects.filter(evaluated_at=None, host__machine_id__startswith=prefix)
               .order_by("collected_at", "id").values_list("report_id", flat=True))
    for report_id in list(pending):
        evaluate_report.run(str(report_id))
    opened = SteadyLane.objects.filter(host__machine_id__startswith=prefix).count()
    print(f"steady lanes opened by the worker: {opened}")
    return opened


def summarise(rates: dict[str, list[float]], accepted: dict[str, int], warm: int) -> int:
    """Print medians, ratios, targets and the stored-row check; 1 if a report was lost."""
    product_rows, baseline_rows = stored_counts()
    base, prod = median(rates["baseline"]), median(rates["product"])
    bare = median(rates["no-metrics"])
    ratio = prod / base if base else 0.0
    print(f"median baseline {base:.1f} reports/s, product {prod:.1f} reports/s, "
          f"ratio {ratio:.2f} (target >= {TARGET_RATIO:.2f}: "
          f"{'met' if ratio >= TARGET_RATIO else 'MISSED'}); absolute target "
          f">= {TARGET_RATE:.0f}/s: {'met' if prod >= TARGET_RATE else 'MISSED'} "
          f"({prod / TARGET_RATE:.0%} of it)")
    lane = median(rates["lane"])
    print(f"steady lane: {lane:.1f} reports/s, ratio {lane / base if base else 0.0:.2f} of "
          f"the baseline (target >= {TARGET_RATIO:.2f}: "
          f"{'met' if base and lane / base >= TARGET_RATIO else 'MISSED'})")
    print(f"product without /metrics in the report: {bare:.1f} reports/s "
          f"(ratio {bare / base if base else 0.0:.2f} of the baseline): the MetricSample "
          f"derivation costs the difference")
    product_sent = accepted["product"] + accepted["no-metrics"] + accepted["lane"] + 3 * warm
    lost = (product_sent - product_rows, accepted["baseline"] + warm - baseline_rows)
    print(f"stored rows: product {product_rows}, baseline {baseline_rows}; "
          f"accepted but not stored: product {lost[0]}, baseline {lost[1]}")
    return 1 if any(lost) else 0


def main() -> int:
    """Parse arguments and run."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", type=int, default=64)
    parser.add_argument("--reports", type=int, default=640, help="reports per trial per side")
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--metrics-form", choices=("compact", "text"), default="compact",
                        help="compact: newer agents (the /metrics numbers; the text on a "
                             "host's first report only); text: older agents (the raw body)")
    args = parser.parse_args()
    if args.hosts % args.threads:
        parser.error("--hosts must be a multiple of --threads (keeps each host's reports in order)")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
