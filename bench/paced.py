"""Benchmark: CPU per steady report when reports arrive one at a time, against the bare insert.

Not a test. A fleet's reports do not arrive back to back: 10,000 hosts every 30 s are 333
separate requests a second, each alone on a gunicorn worker that idled since the last one.
``bench/ingest.py`` measures throughput back to back; this bench measures what each request
costs in CPU at the fleet's own pace, for the product's steady lane and for the bare insert
(``bench/baseline_app``: gzip body, ``json.loads``, one jsonb INSERT) in the same run, so the
floor that any one-request-per-report design pays on this machine is measured beside the
product.

On a dedicated PostgreSQL database (``fleet_bench_paced``, dropped at the end) and Redis db
11: ``--hosts`` hosts (realistic compact reports, two GPUs), their first two reports sent and
derived here so that their steady lanes are open; then, for each pace (back to back, then
``--rates`` reports/s) and each of product and baseline, ``--per-host`` reports of every host
from one client thread, spaced 1/rate apart. CPU is read from ``/proc``: the gunicorn process
tree (its two sync workers) and the PostgreSQL backends of the database (connections live
for the whole run: ``DATABASE_CONN_MAX_AGE`` is raised so no backend's CPU leaves with it).

Prints ms of CPU per request (web, PostgreSQL, both), the product's cost over the baseline's,
and the cores both would need for 10,000 hosts at 30 s. ``--repeats`` rounds; the medians.

Run: ``.venv/bin/python bench/paced.py [--hosts 32 --per-host 10 --rates 80 20 --repeats 2]``.
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
    Gunicorn,
    bench_database,
    bench_env,
    create_baseline_table,
    enroll_hosts,
    flush_redis,
    machine_note,
    median,
    post_all,
    post_one,
    setup_django,
)
from ingest import build_jobs, open_lanes  # noqa: E402
from soak import FLEET_REPORTS_PER_S, backend_pids, cpu_seconds, tree  # noqa: E402

DATABASE = "fleet_bench_paced"
BACK_TO_BACK = 0.0


def send(port: int, path: str, jobs: list[tuple[bytes, str]], rate: float) -> int:
    """POST ``jobs`` in order from this thread, job ``i`` not before ``i / rate`` s after the
    first (back to back when ``rate`` is 0); returns how many were accepted (201/202)."""
    start, accepted = time.monotonic(), 0
    for index, (body, token) in enumerate(jobs):
        if rate:
            wait = start + index / rate - time.monotonic()
            if wait > 0:
                time.sleep(wait)
        accepted += post_one(port, path, body, token) in (201, 202)
    return accepted


def measure(server: Gunicorn, path: str, jobs: list[tuple[bytes, str]],
            rate: float) -> tuple[float, float]:
    """(web, PostgreSQL) CPU ms per accepted request of ``jobs`` sent at ``rate``."""
    before = cpu_seconds(tree(server.proc.pid)), cpu_seconds(backend_pids(DATABASE))
    accepted = send(server.port, path, jobs, rate)
    after = cpu_seconds(tree(server.proc.pid)), cpu_seconds(backend_pids(DATABASE))
    if accepted != len(jobs):
        raise SystemExit(f"{len(jobs) - accepted} of {len(jobs)} reports were refused")
    return tuple(1000 * (b - a) / accepted for a, b in zip(before, after, strict=True))


def run(args: argparse.Namespace) -> None:
    print(f"paced CPU benchmark on {machine_note()}")
    with bench_database(DATABASE) as db_url:
        env = bench_env(db_url, AUDIT_METRICS_INTERVAL_S="86400",
                        AUDIT_FINDING_SEEN_REFRESH_S="86400", DATABASE_CONN_MAX_AGE="3600")
        setup_django(env)
        create_baseline_table()
        flush_redis()
        hosts = enroll_hosts(args.hosts, prefix="lane")
        fleet, start = Fleet(), datetime.now(UTC) - timedelta(days=2)
        warm = build_jobs(fleet, hosts, args.hosts * 2, 0, start, True, "compact")
        paces = [BACK_TO_BACK, *args.rates]
        cost: dict[tuple[str, float], list[tuple[float, float]]] = {}
        with Gunicorn(env, 2) as product, Gunicorn(env, 2, baseline=True) as baseline:
            post_all(product.port, "/api/v1/reports", warm, 4)
            post_all(baseline.port, "/baseline/reports", warm, 4)
            open_lanes("lane")
            seq = 2
            for _ in range(args.repeats):
                for rate in paces:
                    jobs = build_jobs(fleet, hosts, args.hosts * args.per_host, seq, start,
                                      True, "compact")
                    seq += args.per_host
                    for label, server, path in (("lane", product, "/api/v1/reports"),
                                                ("baseline", baseline, "/baseline/reports")):
                        web, pg = measure(server, path, jobs, rate)
                        cost.setdefault((label, rate), []).append((web, pg))
                        print(f"  {label:8} {_pace(rate):>13}: web {web:5.2f} + PostgreSQL "
                              f"{pg:5.2f} = {web + pg:5.2f} ms per request", flush=True)
        flush_redis()
    summarise(cost, paces)


def _pace(rate: float) -> str:
    return "back to back" if rate == BACK_TO_BACK else f"{rate:g} reports/s"


def summarise(cost: dict[tuple[str, float], list[tuple[float, float]]],
              paces: list[float]) -> None:
    """Medians per pace: each tier, the product over the baseline, cores at 10,000 hosts."""
    print("\n| Pace | Steady lane: web + PostgreSQL (ms) | Bare insert: web + PostgreSQL (ms)"
          " | Lane / bare | Cores for 10,000 hosts at 30 s: lane, bare |\n|---|---|---|---|---|")
    for rate in paces:
        lane = [median([c[i] for c in cost[("lane", rate)]]) for i in (0, 1)]
        bare = [median([c[i] for c in cost[("baseline", rate)]]) for i in (0, 1)]
        total_lane, total_bare = sum(lane), sum(bare)
        print(f"| {_pace(rate)} | {lane[0]:.2f} + {lane[1]:.2f} = {total_lane:.2f} | "
              f"{bare[0]:.2f} + {bare[1]:.2f} = {total_bare:.2f} | "
              f"{total_lane / total_bare:.2f}x | "
              f"{total_lane * FLEET_REPORTS_PER_S / 1000:.2f}, "
              f"{total_bare * FLEET_REPORTS_PER_S / 1000:.2f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=32)
    parser.add_argument("--per-host", type=int, default=10,
                        help="reports of every host per pace and round")
    parser.add_argument("--rates", type=float, nargs="+", default=[80.0, 20.0],
                        help="paces in reports/s besides back to back")
    parser.add_argument("--repeats", type=int, default=2)
    run(parser.parse_args())
    return 0


if __name__ == "__main__":
    sys.exit(main())
