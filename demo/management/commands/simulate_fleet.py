"""``manage.py simulate_fleet --url URL``: play the replayed real fleet against a dashboard.

Builds the simulated nodes (``demo``) under ``--sim-dir`` (default
``var/sim``), creates an enrollment secret, enrolls every node through
``POST /api/v1/enroll`` and plays the timeline: each round every reporting node runs one
real ``fleet-agent`` cycle (collect, spool, gzip POST to ``/api/v1/reports``). Bounded:
``--once`` plays one round, ``--duration S`` stops after S seconds, SIGTERM/SIGINT stop it,
and it stops by itself when the dashboard stays unreachable for 90 s. Loopback only:
the dashboard URL must be a loopback address and the emulators bind loopback addresses.

Without a broker (``REDIS_URL`` unset, tasks eager: the embedded demo) there is no Celery
beat, so between rounds this command runs the beat's periodic tasks itself every
``--beat-every`` seconds: the alert sweep, the silent-host check and the unevaluated-report
sweep (``--no-beat`` turns that off).
"""

from __future__ import annotations

import ipaddress
import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from demo.receiver import WebhookReceiver
from demo.timeline import FleetSim, dashboard_up
from fleet.models import AgentToken, EnrollmentSecret

SECRET_NAME = "fleet-simulator"  # noqa: S105  (a label, not the secret)
log = logging.getLogger("demo")


def is_loopback_url(url: str) -> bool:
    """True for ``http(s)://`` URLs whose host is ``localhost`` or a loopback IP."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return False
    if parts.hostname == "localhost":
        return True
    try:
        return ipaddress.ip_address(parts.hostname).is_loopback
    except ValueError:
        return False


def run_beat() -> dict[str, Any]:
    """The periodic tasks Celery beat would run (config/settings.py CELERY_BEAT_SCHEDULE),
    called in-process. Returns what each did."""
    from alerts.alert_tasks import check_silent_hosts, sweep
    from fleet.tasks import sweep_unevaluated

    return {"alerts": sweep(), "silent": check_silent_hosts(), "unevaluated": sweep_unevaluated()}


#: A second SIGTERM/SIGINT this many seconds after the first kills the process; sooner, it is
#: taken as the same request (make demo's Ctrl-C reaches the simulator twice: from the
#: terminal and from demo/run_sim.sh's trap).
SECOND_SIGNAL_AFTER_S = 2.0


def install_stop_handlers(stop: threading.Event) -> None:
    """SIGTERM/SIGINT ask ``stop`` to be set; a later second one ends the process outright.

    The handler never calls ``stop.set()`` itself: Python runs it in the main thread between
    two bytecodes, possibly while that thread holds the Event's internal lock (inside
    ``stop.wait()``), and ``set()`` would then wait on that lock forever with every later
    signal ignored (the ``make demo`` hang). A short-lived thread sets it instead.
    """
    first: list[float] = []

    def handler(signum: int, _frame: Any) -> None:
        if not first:
            first.append(time.monotonic())
            threading.Thread(target=stop.set, name="stop-signal", daemon=True).start()
        elif time.monotonic() - first[0] > SECOND_SIGNAL_AFTER_S:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, handler)


class Command(BaseCommand):
    help = "Enroll the simulated fleet with the dashboard at --url and play its timeline."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--url", required=True, help="dashboard URL (loopback only)")
        parser.add_argument("--speed", type=float, default=1.0,
                            help="timeline speed-up (default 1: the story takes ~3 minutes)")
        parser.add_argument("--once", action="store_true", help="play one round and exit")
        parser.add_argument("--duration", type=float, help="stop after this many seconds")
        parser.add_argument("--sim-dir", default=str(settings.VAR_DIR / "sim"),
                            help="where node trees, agent configs and spools live")
        parser.add_argument("--no-cases", action="store_true",
                            help="only the seed-recipe hosts (skip the case-report hosts)")
        parser.add_argument("--no-beat", action="store_true",
                            help="never run the beat tasks in-process")
        parser.add_argument("--beat-every", type=float, default=30.0, help="seconds")
        parser.add_argument("--wait", type=float, default=60.0,
                            help="seconds to wait for the dashboard to come up")
        parser.add_argument("--receiver-port", type=int,
                            help="also run the demo webhook receiver on 127.0.0.1:PORT")
        parser.add_argument("--receiver-dir", default=str(settings.VAR_DIR / "webhook"),
                            help="where the receiver stores the messages it gets")

    def handle(self, *args: Any, **options: Any) -> None:
        url = options["url"].rstrip("/")
        if not is_loopback_url(url):
            raise CommandError(f"--url must be a loopback http(s) URL, got {url!r}")
        self._wait_for(url, options["wait"])
        stop = threading.Event()
        install_stop_handlers(stop)
        # One line per HTTP call and per spooled report would drown the simulator's own log.
        for name in ("httpx", "fleet_agent"):
            logging.getLogger(name).setLevel(logging.WARNING)
        log.setLevel(logging.INFO)  # the timeline stays visible under LOG_LEVEL=WARNING
        receiver = self._receiver(options)
        sim = FleetSim(Path(options["sim_dir"]), speed=options["speed"],
                       include_cases=not options["no_cases"])
        try:
            reused = self._reusable(sim, url)
            todo = len(sim.nodes) - len(reused)
            if todo:
                sim.enroll(url, self._secret(todo, revoke=not reused), skip=reused)
            sim.start_clock_now()
            if reused:
                self.stdout.write(
                    f"Re-run: {len(reused)} demo host(s) reuse their enrollment, {todo} "
                    "enrolled anew; the timeline continues from its first start (after its "
                    "~3 minutes the final state is held). `make demo-reset` replays it "
                    "from an empty database.")
            self.stdout.write(f"Simulating {len(sim.nodes)} hosts against {url} "
                              f"(interval {sim.interval_s} s, speed {options['speed']}).")
            rounds = sim.run(url, once=options["once"], duration=options["duration"],
                             stop=stop, between_rounds=self._beat(options))
        finally:
            sim.close()
            if receiver:
                receiver.stop()
        self.stdout.write(f"Simulation stopped after {rounds} round(s).")

    def _receiver(self, options: dict[str, Any]) -> WebhookReceiver | None:
        """The demo webhook receiver; a busy port costs the webhook channel, not the fleet."""
        if not options["receiver_port"]:
            return None
        try:
            return WebhookReceiver(Path(options["receiver_dir"]), options["receiver_port"])
        except OSError as exc:
            log.warning("webhook receiver not started on port %s: %s (webhook alerts will "
                        "retry and fail)", options["receiver_port"], exc)
            return None

    def _wait_for(self, url: str, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not dashboard_up(url):
            if time.monotonic() > deadline:
                raise CommandError(f"dashboard {url} did not answer /api/v1/health")
            time.sleep(1.0)

    def _reusable(self, sim: FleetSim, url: str) -> frozenset[str]:
        """Nodes whose ``agent.toml`` (from a previous run) holds a token that still
        authenticates: a re-run reuses the demo's hosts instead of enrolling them again."""
        return frozenset(name for name, node in sim.nodes.items()
                         if (token := node.saved_token(url)) and AgentToken.authenticate(token))

    def _secret(self, machines: int, revoke: bool = True) -> str:
        """A fresh secret for ``machines`` enrollments. On a first run (``revoke``) older
        simulator secrets are revoked (their tokens die with them); a re-run keeps them, since
        the reused hosts' tokens were minted by them."""
        if revoke:
            EnrollmentSecret.objects.filter(name=SECRET_NAME, revoked_at=None).update(
                revoked_at=timezone.now())
        _, secret = EnrollmentSecret.create(SECRET_NAME, max_uses=max(1, machines))
        return secret

    def _beat(self, options: dict[str, Any]):
        if options["no_beat"] or not settings.CELERY_TASK_ALWAYS_EAGER:
            return None
        last = [0.0]

        def beat() -> None:
            if time.monotonic() - last[0] < options["beat_every"]:
                return
            last[0] = time.monotonic()
            try:
                log.info("beat: %s", run_beat())
            except Exception:  # a locked SQLite file must not end the simulation
                log.exception("beat tasks failed; retrying next round")
        return beat
