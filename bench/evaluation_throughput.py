"""Benchmark: what a steady report costs the worker and the whole steady tier, the steady
lane off and on, and the steady-state cost of a 10,000-host fleet.

Not a test. Each cycle every host posts one report through the real API (in-process WSGI
client, dedicated database ``fleet_bench_eval``, Redis db 11 as the broker the enqueue
talks to), then the worker's task runs in this one process on what the cycle queued, one
report at a time, as a worker that keeps up would (``fleet.recording.derive_report``, timed
as "derive", ``audit.evaluation.evaluate_report`` and the arming of the steady lane, timed
by cadence): one Python thread is one core (PostgreSQL runs on the other core; its time
counts as wall, not CPU).

Reports are 30 s apart (the agent's default interval), so with the default
``AUDIT_METRICS_INTERVAL_S=300`` the cadence split shows up by itself:

* the host's first report: config + metric rules (findings opened) - "full";
* later reports: nothing due ("skip"), or, every 300 s, the metric rules - "metrics";
* with the steady lane on (``fleet.lane``), later reports are applied in the request
  ("lane": the lane's part of the request, i.e. the derivation) and only those whose metric
  rules are due reach the worker, already derived.

After a report whose config rules ran, the upgrade plans of those servers are stored
(``advice.plans.store_plans``): "plan", or "plan-copy" when an identical configuration's
plans were copied (hosts share the capture's argv).

Both runs, the lane off (every report through the worker: the baseline) and on, use the same
database and report generator on separate hosts, in the same process. Printed per run:
medians per kind, then per steady report (a host's later report; means, so the one report
in ten with metric rules due counts with its weight) the CPU of derive + evaluate, of the
request, and of the whole steady tier (request + worker), with the cores that makes for
10,000 hosts at 30 s (333 reports/s) plus ``--config-changes-per-day`` full evaluations and
plannings per server; and the on/off ratios. ``--metrics-form text`` replays older agents
(raw text every report: the lane is closed to them).

Run: ``.venv/bin/python bench/evaluation_throughput.py [--hosts 24 --reports 21]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import defaultdict
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
    median,
    post_in_process,
    realistic_report,
    setup_django,
)

FLEET_HOSTS = 10_000  # the sizing target: a 10,000-host fleet
INTERVAL_S = 30  # agent default report interval
METRICS_INTERVAL_S = 300  # settings.AUDIT_METRICS_INTERVAL_S default (5 minutes)


def cycles(hosts: list[tuple[str, str, str]], reports: int, form: str,
           lane: bool) -> dict[str, list[tuple[float, float]]]:
    """Post ``reports`` reports per host, 30 s apart, one cycle of the fleet at a time, then
    run the worker on what the cycle queued (a worker that keeps up), with the steady lane
    on or off. ``form`` ``compact``: the newer agent (text and numbers on a host's first
    report, numbers alone after, each scrape's counters 1 % up on the last).

    Returns ``{kind: [(wall_s, cpu_s), ...]}``: ``request`` (every POST) and
    ``request-steady`` (a host's later reports), ``lane`` (the lane's part of a request that
    it applied: the derivation in the request), the worker's kinds (:func:`work`), and
    ``steady`` per steady report: lane plus worker CPU (derive + evaluate) that report cost.
    """
    from django.conf import settings

    from fleet import lane as fleet_lane
    from fleet.models import Report

    settings.INGEST_STEADY_LANE = lane
    timings: dict[str, list[tuple[float, float]]] = defaultdict(list)
    lane_cpu: dict[str, tuple[float, float]] = {}
    apply = fleet_lane.apply

    def timed_apply(host_id, wire, *args, **kwargs):  # noqa: ANN001, ANN202
        wall, cpu = time.perf_counter(), time.process_time()
        applied = apply(host_id, wire, *args, **kwargs)
        if applied is not None:
            lane_cpu[str(wire.report_id)] = (time.perf_counter() - wall,
                                             time.process_time() - cpu)
        return applied

    fleet, client = Fleet(), api_client()
    start = datetime.now(UTC) - timedelta(days=1)
    machines = {machine_id for machine_id, _, _ in hosts}
    pg_start = None
    with mock.patch.object(fleet_lane, "apply", timed_apply):
        for seq in range(reports):
            if seq == 1:  # the steady cycles start: PostgreSQL's CPU from here on
                pg_start = backend_cpu_s()
            posted = []
            for index, (machine_id, hostname, token) in enumerate(hosts):
                at = start + timedelta(seconds=seq * INTERVAL_S)
                metrics_form = form if form == "text" else ("both" if seq == 0 else "compact")
                report = realistic_report(fleet, index, machine_id, hostname, at,
                                          metrics_form=metrics_form, step=seq)
                body = gzip_json(report)
                wall, cpu = time.perf_counter(), time.process_time()
                status = post_in_process(client, body, token)
                request = (time.perf_counter() - wall, time.process_time() - cpu)
                if status != 202:
                    raise RuntimeError(f"ingest answered {status}")
                timings["request"].append(request)
                if seq:
                    timings["request-steady"].append(request)
                    posted.append(report["report_id"])
            worker = {}
            pending = (Report.objects.filter(evaluated_at=None, host__machine_id__in=machines)
                       .order_by("collected_at", "id").values_list("report_id", flat=True))
            for report_id in [str(r) for r in pending]:
                worker[report_id] = work(report_id, timings)
            for report_id in posted:  # a steady report: the lane's part and the worker's
                in_lane = lane_cpu.get(report_id, (0.0, 0.0))
                queued = worker.get(report_id, (0.0, 0.0))
                if report_id in lane_cpu:
                    timings["lane"].append(in_lane)
                timings["steady"].append((in_lane[0] + queued[0], in_lane[1] + queued[1]))
            for report_id, request in zip(posted, timings["request-steady"][-len(posted):],
                                          strict=True):
                queued = worker.get(report_id, (0.0, 0.0))
                timings["tier-steady"].append((request[0] + queued[0], request[1] + queued[1]))
    if reports > 1 and pg_start is not None:
        pg_end = backend_cpu_s()
        if pg_end is not None:
            steady_reports = len(hosts) * (reports - 1)
            timings["pg-steady"] = [(0.0, (pg_end - pg_start) / steady_reports)]
    return timings


def backend_cpu_s() -> float | None:
    """CPU seconds (user + system) the PostgreSQL backend of this process's connection has
    used, from its ``/proc/<pid>/stat``; None when that backend is not on this machine.
    The in-process requests and worker share this one connection, so its delta over the
    steady cycles is PostgreSQL's CPU for them."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def work(report_id: str, timings: dict[str, list[tuple[float, float]]]) -> tuple[float, float]:
    """The worker's task on one report (``audit.tasks.evaluate_report``): derive (timed as
    "derive"), evaluate (timed by cadence: "full", "metrics", "config", "skip"), arm the
    steady lane, then store the upgrade plans of servers whose config rules ran ("plan",
    or "plan-copy" when an identical configuration's plans were copied: advice's receiver,
    its own task). Returns ``(wall_s, cpu_s)`` of derive + evaluate + arm."""
    from advice.plans import store_plans
    from audit.evaluation import evaluate_report
    from audit.lane import arm_lane
    from fleet.recording import derive_report

    wall, cpu = time.perf_counter(), time.process_time()
    derive_report(report_id)
    derived = (time.perf_counter() - wall, time.process_time() - cpu)
    timings["derive"].append(derived)
    wall, cpu = time.perf_counter(), time.process_time()
    outcomes = evaluate_report(report_id)
    arm_lane(report_id)
    evaluated = (time.perf_counter() - wall, time.process_time() - cpu)
    cadences = sorted({c for o in outcomes or [] for c in o.cadences})
    kind = {("config", "metrics"): "full", ("metrics",): "metrics",
            ("config",): "config"}.get(tuple(cadences), "skip")
    timings[kind].append(evaluated)
    configured = [o.server_id for o in outcomes or [] if "config" in o.cadences]
    if configured:  # what the task's findings_evaluated receiver does next (advice)
        wall, cpu = time.perf_counter(), time.process_time()
        planned = store_plans(report_id, configured)
        timings["plan" if planned else "plan-copy"].append(
            (time.perf_counter() - wall, time.process_time() - cpu))
    return derived[0] + evaluated[0], derived[1] + evaluated[1]


def baseline() -> list[float]:
    """Seconds of the bare in-memory ``kb.evaluate(ctx)`` on each host's first report."""
    from audit.kb.context import build_contexts
    from audit.rulebook import current_knowledge_base
    from fleet.models import Report

    kb = current_knowledge_base()
    seen, times = set(), []
    for row in Report.objects.order_by("collected_at"):
        if row.host_id in seen:
            continue
        seen.add(row.host_id)
        ctx = build_contexts(row.raw, [])[0]
        start = time.perf_counter()
        kb.evaluate(ctx)
        times.append(time.perf_counter() - start)
    return times


def mean(values: list[float]) -> float:
    """Arithmetic mean (0.0 for none): amortised costs, where the one report in ten whose
    metric rules are due counts with its weight."""
    return sum(values) / len(values) if values else 0.0


def report(name: str, timings: dict[str, list[tuple[float, float]]], bare: float,
           changes_per_day: float) -> dict[str, float]:
    """Print one run's medians per kind and its steady-report costs; returns the means."""
    print(f"{name}:")
    for kind in ("request", "request-steady", "lane", "derive", "full", "metrics", "config",
                 "skip", "plan", "plan-copy"):
        rows = timings.get(kind, [])
        if not rows:
            continue
        wall, cpu = median([w for w, _ in rows]), median([c for _, c in rows])
        print(f"  {kind:<14} n={len(rows):4d}  median {wall * 1000:7.2f} ms wall, "
              f"{cpu * 1000:7.2f} ms CPU ({wall / bare:5.1f}x the bare KB's wall)")
    steady = mean([c for _, c in timings["steady"]])
    tier = mean([c for _, c in timings["tier-steady"]])
    request = mean([c for _, c in timings["request-steady"]])
    reports_per_s = FLEET_HOSTS / INTERVAL_S
    # A configuration change costs a full evaluation and a planning on top of the steady one.
    changes = FLEET_HOSTS * changes_per_day / 86400 * sum(
        median([c for _, c in timings.get(kind) or [(0.0, 0.0)]]) for kind in ("full", "plan"))
    pg = timings.get("pg-steady")
    pg_cpu = pg[0][1] if pg else None
    print(f"  steady report (nothing changed but metrics; one in "
          f"{METRICS_INTERVAL_S // INTERVAL_S} has its metric rules due), mean CPU: derive + "
          f"evaluate {steady * 1000:.2f} ms; the request {request * 1000:.2f} ms; the whole "
          f"steady tier (request + worker) {tier * 1000:.2f} ms -> {reports_per_s * tier:.2f} "
          f"cores for {FLEET_HOSTS:,} hosts at {INTERVAL_S} s, "
          f"+{changes:.2f} for {changes_per_day:g} configuration change/server/day")
    if pg_cpu is not None:
        print(f"  PostgreSQL (its backend's CPU over the steady cycles) {pg_cpu * 1000:.2f} ms "
              f"per steady report; with it, the whole steady tier {(tier + pg_cpu) * 1000:.2f} "
              f"ms -> {reports_per_s * (tier + pg_cpu):.2f} cores")
    return {"steady": steady, "tier": tier, "request": request, "pg": pg_cpu or 0.0}


def run(args: argparse.Namespace) -> None:
    """Ingest and work cycle by cycle, the lane off then on, on separate hosts of one
    database; print medians, the steady costs and their ratio."""
    print(f"evaluation benchmark on {machine_note()}")
    with bench_database("fleet_bench_eval") as db_url:
        setup_django(bench_env(db_url))
        flush_redis()
        hosts = enroll_hosts(2 * args.hosts)
        off = cycles(hosts[:args.hosts], args.reports, args.metrics_form, lane=False)
        if args.profile:
            import cProfile
            import pstats

            profiler = cProfile.Profile(time.process_time)  # CPU, not wall
            on = profiler.runcall(cycles, hosts[args.hosts:], args.reports,
                                  args.metrics_form, True)
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(args.profile)
        else:
            on = cycles(hosts[args.hosts:], args.reports, args.metrics_form, lane=True)
        bare = median(baseline())
        print(f"baseline: bare kb.evaluate(ctx), all rules, in memory: median "
              f"{bare * 1000:.2f} ms")
        before = report("steady lane off (every report through the worker)", off, bare,
                        args.config_changes_per_day)
        after = report("steady lane on", on, bare, args.config_changes_per_day)
        print(f"lane on / off, same run: derive + evaluate "
              f"{after['steady'] / before['steady']:.2f}x, whole steady tier "
              f"{after['tier'] / before['tier']:.2f}x" + _with_pg_ratio(before, after))
        flush_redis()


def _with_pg_ratio(before: dict[str, float], after: dict[str, float]) -> str:
    if not (before["pg"] and after["pg"]):
        return ""
    ratio = (after["tier"] + after["pg"]) / (before["tier"] + before["pg"])
    return f", with PostgreSQL {ratio:.2f}x"


def main() -> None:
    """Parse arguments and run."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", type=int, default=24)
    parser.add_argument("--reports", type=int, default=21, help="reports per host, 30 s apart")
    parser.add_argument("--config-changes-per-day", type=float, default=1.0)
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="profile the lane-on run (cProfile, CPU), print the top N by "
                             "cumulative time")
    parser.add_argument("--metrics-form", choices=("compact", "text"), default="compact",
                        help="compact: newer agents (numbers after the first report); "
                             "text: older agents (the raw body every report)")
    run(parser.parse_args())


if __name__ == "__main__":
    main()
