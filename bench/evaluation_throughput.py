"""Benchmark: evaluation throughput per core, and the steady-state cost of a 10,000-host fleet.

Not a test. Reports are ingested through the real API (in-process WSGI client, dedicated
database ``fleet_bench_eval``, Redis db 11 as the broker the enqueue talks to, no worker),
then the worker's two steps run in this one process, one report at a time
(``fleet.recording.derive_report``, timed as "derive", then ``audit.evaluation.evaluate_report``):
one Python thread is one core (PostgreSQL runs on the other core; its time counts as wall).

Each host sends ``--reports`` reports 30 s apart (agent default interval), so with the
default ``AUDIT_METRICS_INTERVAL_S=300`` the cadence split shows up by itself:

* the host's first report: config + metric rules (findings opened) - "full";
* reports 2..10: nothing due (fingerprint unchanged, metric window not reached) - "skip";
* report 11 (300 s later): metric rules only - "metrics".

After a report whose config rules ran, the upgrade plans of those servers are stored
(``advice.plans.store_plans``, what ``audit.tasks.evaluate_report``'s receiver does): "plan"
when the configuration was evaluated for every release the KB knows, "plan-copy" when an
identical configuration's plans were copied (hosts share the capture's argv).

Baseline measured in the same run: ``KnowledgeBase.evaluate(ctx)`` on the same contexts,
in memory (no database, no findings): the ratio says what the database work adds.

The fleet cost assumes one vLLM server per host, a 30 s report interval (333 reports/s)
and ``--config-changes-per-day`` fingerprint changes per server (restarts, upgrades,
flag edits; default 1).

A steady report (nothing changed but metrics) is timed as derive + evaluate CPU and printed
per cadence ("steady report"); ``--metrics-form text`` replays older agents (raw text every
report) for comparison.

Run: ``.venv/bin/python bench/evaluation_throughput.py [--hosts 24 --reports 11]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
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
    gzip_json,
    machine_note,
    median,
    post_in_process,
    realistic_report,
    setup_django,
)

FLEET_HOSTS = 10_000  # the sizing target: a 10,000-host fleet
INTERVAL_S = 30  # agent default report interval
METRICS_INTERVAL_S = 300  # settings.AUDIT_METRICS_INTERVAL_S default (5 minutes)


def ingest(hosts: list[tuple[str, str, str]], reports: int, form: str = "text") -> list[str]:
    """Post ``reports`` reports per host (30 s apart); returns report ids in collected order.
    ``form`` ``compact``: the newer agent (text and numbers on a host's first report,
    numbers alone after, each scrape's counters 1 % up on the last)."""
    from fleet.models import Report

    fleet, client = Fleet(), api_client()
    start = datetime.now(UTC) - timedelta(days=1)
    for seq in range(reports):
        for index, (machine_id, hostname, token) in enumerate(hosts):
            at = start + timedelta(seconds=seq * INTERVAL_S)
            metrics_form = form if form == "text" else ("both" if seq == 0 else "compact")
            body = gzip_json(realistic_report(fleet, index, machine_id, hostname, at,
                                              metrics_form=metrics_form, step=seq))
            status = post_in_process(client, body, token)
            if status != 202:
                raise RuntimeError(f"ingest answered {status}")
    return [str(r) for r in Report.objects.order_by("collected_at", "id")
            .values_list("report_id", flat=True)]


def evaluate_all(report_ids: list[str]) -> dict[str, list[tuple[float, float]]]:
    """Derive then evaluate every report (the worker's two steps); ``{kind: [(wall_s, cpu_s),
    ...]}`` by cadences that ran, plus ``derive`` (servers, GPUs, samples from the raw body)."""
    from advice.plans import store_plans
    from audit.evaluation import evaluate_report
    from fleet.recording import derive_report

    timings: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for report_id in report_ids:
        wall, cpu = time.perf_counter(), time.process_time()
        derive_report(report_id)
        derived = (time.perf_counter() - wall, time.process_time() - cpu)
        timings["derive"].append(derived)
        wall, cpu = time.perf_counter(), time.process_time()
        outcomes = evaluate_report(report_id)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        cadences = sorted({c for o in outcomes or [] for c in o.cadences})
        kind = {("config", "metrics"): "full", ("metrics",): "metrics",
                ("config",): "config"}.get(tuple(cadences), "skip")
        timings[kind].append((wall, cpu))
        if kind in ("skip", "metrics"):  # a steady report: nothing changed but metrics
            timings[f"steady-{kind}"].append((derived[0] + wall, derived[1] + cpu))
        configured = [o.server_id for o in outcomes or [] if "config" in o.cadences]
        if configured:  # what the task's findings_evaluated receiver does next (advice)
            wall, cpu = time.perf_counter(), time.process_time()
            evaluated = store_plans(report_id, configured)
            timings["plan" if evaluated else "plan-copy"].append(
                (time.perf_counter() - wall, time.process_time() - cpu))
    return timings


def baseline(report_ids: list[str]) -> list[float]:
    """Seconds of the bare in-memory ``kb.evaluate(ctx)`` per first report of each host."""
    from audit.kb.context import build_contexts
    from audit.rulebook import current_knowledge_base
    from fleet.models import Report

    kb = current_knowledge_base()
    seen, times = set(), []
    for report in Report.objects.filter(report_id__in=report_ids).order_by("collected_at"):
        if report.host_id in seen:
            continue
        seen.add(report.host_id)
        ctx = build_contexts(report.raw, [])[0]
        start = time.perf_counter()
        kb.evaluate(ctx)
        times.append(time.perf_counter() - start)
    return times


def fleet_cost(per_kind: dict[str, float], changes_per_day: float) -> None:
    """Print the steady-state evaluation load of :data:`FLEET_HOSTS` hosts in cores."""
    reports_per_s = FLEET_HOSTS / INTERVAL_S
    metrics_share = INTERVAL_S / METRICS_INTERVAL_S  # one report in 10 runs metric rules
    full_per_s = FLEET_HOSTS * changes_per_day / 86400
    core_s = (reports_per_s * (metrics_share * per_kind["metrics"]
                               + (1 - metrics_share) * per_kind["skip"])
              + full_per_s * (per_kind["full"] - per_kind["metrics"]))
    naive = reports_per_s * per_kind["full"]
    # The worker also derives every report (servers, GPUs, samples, one /metrics parse) and
    # plans each configuration change: the whole evaluate tier, not the evaluation alone.
    worker_s = (core_s + reports_per_s * per_kind.get("derive", 0.0)
                + full_per_s * per_kind.get("plan", 0.0))
    print(f"10,000-host fleet, 30 s interval ({reports_per_s:.0f} reports/s), metric rules "
          f"every {METRICS_INTERVAL_S} s, {changes_per_day:g} config change/server/day: "
          f"{core_s:.2f} core-seconds per second (= cores busy, database time included); "
          f"evaluating every rule on every report would need {naive:.1f}; with derivation "
          f"and planning the worker tier needs {worker_s:.1f}")


def steady_cost(timings: dict[str, list[tuple[float, float]]]) -> None:
    """Print derive + evaluate CPU per steady report (nothing changed but metrics): the
    mean over the cadence mix, one report in ``METRICS_INTERVAL_S / INTERVAL_S`` running
    the metric rules, the others nothing due."""
    skip, metrics = timings.get("steady-skip"), timings.get("steady-metrics")
    if not skip:
        return
    share = INTERVAL_S / METRICS_INTERVAL_S
    skip_cpu = median([c for _, c in skip])
    metrics_cpu = median([c for _, c in metrics]) if metrics else skip_cpu
    mean_cpu = (1 - share) * skip_cpu + share * metrics_cpu
    print(f"  steady report, derive + evaluate: {skip_cpu * 1000:.2f} ms CPU (nothing due, "
          f"n={len(skip)}), {metrics_cpu * 1000:.2f} ms CPU (metric rules due, "
          f"n={len(metrics or [])}); cadence mix {mean_cpu * 1000:.2f} ms CPU/report -> "
          f"{FLEET_HOSTS / INTERVAL_S * mean_cpu:.2f} worker cores for {FLEET_HOSTS:,} hosts "
          f"at {INTERVAL_S} s")


def run(args: argparse.Namespace) -> None:
    """Ingest, evaluate, print medians, ratios and the fleet cost."""
    print(f"evaluation benchmark on {machine_note()}")
    with bench_database("fleet_bench_eval") as db_url:
        setup_django(bench_env(db_url))
        flush_redis()
        report_ids = ingest(enroll_hosts(args.hosts), args.reports, args.metrics_form)
        flush_redis()  # the API queued every report for a worker that is not running
        if args.profile:
            import cProfile
            import pstats

            profiler = cProfile.Profile(time.process_time)  # CPU, not wall
            timings = profiler.runcall(evaluate_all, report_ids)
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(args.profile)
        else:
            timings = evaluate_all(report_ids)
        bare = median(baseline(report_ids))
        per_kind = {}
        for kind in ("derive", "full", "metrics", "config", "skip", "plan", "plan-copy"):
            rows = timings.get(kind, [])
            if not rows:
                continue
            wall, cpu = median([w for w, _ in rows]), median([c for _, c in rows])
            per_kind[kind] = wall
            print(f"  {kind:<8} n={len(rows):4d}  median {wall * 1000:7.2f} ms wall, "
                  f"{cpu * 1000:7.2f} ms CPU  -> {1 / wall:7.1f} server-evaluations/s per "
                  f"core; {wall / bare:5.1f}x the bare KB")
        print(f"  baseline: bare kb.evaluate(ctx), all rules, in memory: median "
              f"{bare * 1000:.2f} ms -> {1 / bare:.0f}/s per core")
        if {"full", "metrics", "skip"} <= per_kind.keys():
            fleet_cost(per_kind, args.config_changes_per_day)
        steady_cost(timings)
        flush_redis()


def main() -> None:
    """Parse arguments and run."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", type=int, default=24)
    parser.add_argument("--reports", type=int, default=11, help="reports per host, 30 s apart")
    parser.add_argument("--config-changes-per-day", type=float, default=1.0)
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="profile the worker steps (cProfile), print the top N by "
                             "cumulative time")
    parser.add_argument("--metrics-form", choices=("compact", "text"), default="compact",
                        help="compact: newer agents (numbers after the first report); "
                             "text: older agents (the raw body every report)")
    run(parser.parse_args())


if __name__ == "__main__":
    main()
