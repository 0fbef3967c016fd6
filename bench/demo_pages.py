"""Page times with the demo's fleet on the embedded default (SQLite).

Seeds the demo fleet the way ``make demo`` does (``migrate``, ``load_rules``, ``demo_seed``,
then one ``simulate_fleet --once`` round of every demo host's real agent against a
``runserver`` on a free 127.0.0.1 port), all in a temporary directory, then times each page
with Django's test client in this process (median of REPEAT warm requests after one cold
one). Target: every page under 300 ms (BENCHMARKS.md). Not a test: it prints a table.

The planner pages keep no whole-page cache: they read the plans the worker stored while the
simulator's reports were evaluated (``advice.plans``), so "cold" (a fresh process, empty
cache) is also the first visit after new reports.

Run: ``.venv/bin/python bench/demo_pages.py`` (no PostgreSQL or Redis needed).
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REPEAT = 5
#: ``/plan/?target=0.27.1``: a release the planner lists (stored by the worker);
#: ``/plan/?target=0.27.0``: the target the issue timed, typed by hand (no timeline release),
#: planned on the visit at most ``advice.plans.LAZY_CONFIGURATIONS`` configurations a time.
PAGES = ("/", "/findings/", "/versions/", "/kb/", "/plan/fleet/", "/plan/?target=0.27.1",
         "/plan/?target=0.27.0")
TARGET_MS = 300


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _manage(env: dict[str, str], *args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "manage.py", *args], cwd=REPO, env=env,
                          check=True, **kwargs)


def seed(tmp: Path) -> dict[str, str]:
    """The demo fleet in ``tmp/fleet.sqlite3``; returns the environment that reads it."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(DEBUG="true", DATABASE_URL=f"sqlite:///{tmp / 'fleet.sqlite3'}",
               LOG_LEVEL="WARNING", AUDIT_METRICS_INTERVAL_S="30",
               EMAIL_BACKEND="django.core.mail.backends.locmem.EmailBackend")
    _manage(env, "migrate", "--noinput", "-v0")
    _manage(env, "load_rules", stdout=subprocess.DEVNULL)
    _manage(env, "demo_seed", "--no-fixtures", stdout=subprocess.DEVNULL)
    port = _free_port()
    server = subprocess.Popen([sys.executable, "manage.py", "runserver", "--noreload",
                               f"127.0.0.1:{port}"], cwd=REPO, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        started = time.monotonic()
        _manage(env, "simulate_fleet", "--url", f"http://127.0.0.1:{port}", "--once",
                "--sim-dir", str(tmp / "sim"), "--receiver-dir", str(tmp / "webhook"),
                "--no-beat", stdout=subprocess.DEVNULL)
        print(f"seeded the demo fleet in {time.monotonic() - started:.0f} s")
    finally:
        server.terminate()
        server.wait(timeout=30)
    return env


def measure() -> list[tuple[str, float, float, float, int]]:
    """(page, cold ms, cold CPU ms, warm median ms, status) per page; runs inside the seeded
    settings. CPU time (this process) says more than wall time on a loaded machine."""
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.test import Client

    from fleet.models import Host, Server

    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(get_user_model().objects.filter(is_superuser=True).first()
                       or get_user_model().objects.first())
    from advice.models import ServerPlan

    print(f"{Host.objects.count()} hosts, {Server.objects.count()} servers, "
          f"{ServerPlan.objects.count()} stored plans "
          f"({ServerPlan.objects.values('fingerprint').distinct().count()} configurations)")
    out = []
    for url in PAGES:
        times, cpu = [], []
        for _ in range(REPEAT + 1):
            started, started_cpu = time.perf_counter(), time.process_time()
            status = client.get(url).status_code
            times.append((time.perf_counter() - started) * 1000)
            cpu.append((time.process_time() - started_cpu) * 1000)
        out.append((url, times[0], cpu[0], statistics.median(times[1:]), status))
    return out


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="fa-demo-bench-") as tmp:
        env = seed(Path(tmp))
        os.environ.update(env)
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
        sys.path.insert(0, str(REPO))
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        print(f"{'page':32} {'cold ms':>8} {'cold CPU':>8} {'warm ms':>8}  status  "
              f"target {TARGET_MS} ms (cold and warm)")
        for url, cold, cold_cpu, warm, status in measure():
            verdict = "met" if max(cold, warm) < TARGET_MS else "MISSED"
            print(f"{url:32} {cold:8.0f} {cold_cpu:8.0f} {warm:8.0f}  {status:6}  {verdict}")


if __name__ == "__main__":
    main()
