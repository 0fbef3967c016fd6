"""The demo fleet and the timeline it plays, driving the real agent against a dashboard.

:class:`FleetSim` builds every node (seed recipes, then one per case report), enrolls them
through ``POST /api/v1/enroll`` and runs rounds: in each round every node that is not
silent runs one real ``fleet-agent`` cycle (collect from its ``/proc`` tree and
emulators, spool, gzip POST to ``/api/v1/reports``). Nothing reaches the database except
through that API.

The timeline (:data:`TIMELINE`, seconds after the fleet's epoch at speed 1; ``--speed N``
divides them) plays these scenarios:

* 40 s  ``gb10-spark-03`` load ramps to c256: queueing collapse (seed 003);
* 60 s  ``h100-push-02`` upgrades 0.25.1 -> 0.27.0 (new image, restart): risky upgrade;
* 80 s  ``h100-spec-04`` restarts at TP=2: EAGLE3 acceptance collapses (#50158);
* 100 s ``h100-chat-05`` restarts with the same version and flags (again at 160 s);
* 120 s ``h100-batch-06`` stops reporting (silent host);
* 140 s ``h100-upgrade-08`` restarts onto its installed 0.27.1, which cannot read Gemma 4's
  per-layer ``head_dim`` (vllm#51744): its systemd unit crash-loops;
* from the start ``h100-chat-03`` has 0.28.0 installed under a running 0.25.1 (pending
  upgrade) and ``h100-awq-07`` serves the cyankiwi bundled chat template.

Once the story is over (90 s after the last event) the agents report every 30 s, the
agent's default, holding the final state. The epoch is kept in ``<base>/epoch.json``: a
restarted simulator rebuilds the state the timeline had reached (same pids and start
times), so re-running the demo holds the final state instead of replaying restarts and
upgrades.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from dataclasses import dataclass
from pathlib import Path

import httpx

from demo import seedfleet
from demo.casehosts import case_hosts
from demo.node import SimNode
from demo.seedfleet import as_container, tp2_server
from demo.specs import GB10_BYTES, HostSpec

log = logging.getLogger("demo")

#: Agent interval at speed 1, seconds (the dashboard's "silent" threshold is 5 intervals).
DEFAULT_INTERVAL_S = 10
#: Agent interval once the story is over (the agent's own default), at speed 1: holding the
#: final state at 10 s would store ~0.6 GB of raw reports per hour in the demo's SQLite.
STEADY_INTERVAL_S = 30
#: Seconds (speed 1) after the last event before the steady interval applies.
SETTLE_AFTER_S = 90
#: A dashboard unreachable for this long (seconds) ends the simulation.
GIVE_UP_AFTER_S = 90
#: Longest wait for every emulator to stop on close, seconds (each stop is bounded by
#: demo.emulator.STOP_TIMEOUT_S; SIGTERM must end the simulator well within ~10 s).
CLOSE_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Event:
    """One scenario step: at ``at_s`` (speed-1 seconds after the epoch) do ``action``."""

    at_s: float
    host: str
    action: str
    text: str


TIMELINE: tuple[Event, ...] = (
    Event(40, "gb10-spark-03", "collapse", "load ramps to c256: queueing collapse (seed 003)"),
    Event(60, "h100-push-02", "upgrade", "upgrade 0.25.1 -> 0.27.0 (image v0.27.0, restart)"),
    Event(80, "h100-spec-04", "tp2", "restart with --tensor-parallel-size 2 (#50158)"),
    Event(100, "h100-chat-05", "restart", "restart, same version and flags"),
    Event(120, "h100-batch-06", "silent", "agent stops reporting"),
    Event(140, "h100-upgrade-08", "fail_upgrade",
          "restart onto the installed 0.27.1: start-up fails, systemd crash loop"),
    Event(160, "h100-chat-05", "restart", "restart again, same version and flags"),
)

#: The journal of the failed upgrade: start-up lines, then the error vLLM 0.27.x images hit
#: with Gemma 4 under transformers 5.15 (quoted in https://github.com/vllm-project/vllm/issues/51744).
FAILED_UPGRADE_JOURNAL = (
    "INFO 12-01 06:00:01 [api_server.py:1] vLLM API server version 0.27.1",
    "(APIServer pid=7) Traceback (most recent call last):",
    "(APIServer pid=7) transformers.integrations.heterogeneity.configuration_utils."
    "AmbiguousGlobalPerLayerAttributeError: 'head_dim' is a per-layer attribute and may vary "
    "across layers.",
)


def fleet_specs(include_cases: bool = True) -> list[HostSpec]:
    """The demo fleet: seed-recipe hosts first, then one host per case report."""
    return seedfleet.seed_hosts() + (case_hosts() if include_cases else [])


def apply(event: Event, node: SimNode, at: float) -> None:
    """Apply ``event`` to ``node`` as of Unix time ``at``."""
    if event.action == "silent":
        node.silent = True
        return
    server = next(iter(node.servers.values())).spec
    if event.action == "collapse":
        node.set_workload(server.key, seedfleet.C256_COLLAPSE)
        for running in node.servers.values():
            # seed 003: peak 118.29 GB of the 121 GB unified ceiling at c256
            running.spec = running.spec.changed(mem_fraction=118.29e9 / GB10_BYTES)
    elif event.action == "upgrade":
        new = as_container(server.changed(version="0.27.0", installed=None,
                                          argv=("/opt/vllm/bin/python3", "/opt/vllm/bin/vllm",
                                                *server.argv[2:])),
                           "vllm/vllm-openai:v0.27.0", node.spec.hostname)
        node.replace_server(new, at)
    elif event.action == "tp2":
        node.replace_server(tp2_server(server), at)
    elif event.action == "restart":
        node.replace_server(server, at)
    elif event.action == "fail_upgrade":
        node.fail_start(server.key, list(FAILED_UPGRADE_JOURNAL), at)


class FleetSim:
    """The simulated fleet. ``base``: state directory (``var/sim``); ``speed`` compresses
    the timeline (and the agent interval, never below 2 s)."""

    def __init__(self, base: Path, speed: float = 1.0, include_cases: bool = True,
                 timeline: tuple[Event, ...] = TIMELINE,
                 specs: list[HostSpec] | None = None):
        self.base = base
        self.speed = max(0.01, speed)
        self.interval_s = max(2, round(DEFAULT_INTERVAL_S / self.speed))
        self.timeline = timeline
        self.fresh = not (base / "epoch.json").exists()
        self.epoch = self._epoch()
        #: The time the initial servers are dated from: fixed at the first run and kept in
        #: epoch.json, so a re-run shows the same processes (same start times), never a
        #: restart of every server, even though start_clock_now() moved the story's epoch.
        self.origin = self._saved("origin", self.epoch)
        self.applied: set[int] = set()
        self.nodes: dict[str, SimNode] = {}
        for index, spec in enumerate(specs or fleet_specs(include_cases)):
            self.nodes[spec.hostname] = SimNode(spec, base, index, self.origin, self.interval_s)
        self.apply_due(time.time(), quiet=True)
        self.settle(time.time())

    def _epoch(self) -> float:
        self.base.mkdir(parents=True, exist_ok=True)
        path = self.base / "epoch.json"
        try:
            return float(json.loads(path.read_text())["epoch"])
        except (OSError, ValueError, KeyError, TypeError):
            epoch = time.time()
            path.write_text(json.dumps({"epoch": epoch, "origin": epoch}))
            return epoch

    def _saved(self, key: str, default: float) -> float:
        try:
            return float(json.loads((self.base / "epoch.json").read_text())[key])
        except (OSError, ValueError, KeyError, TypeError):
            return default

    def _save_epoch(self) -> None:
        (self.base / "epoch.json").write_text(json.dumps({"epoch": self.epoch,
                                                          "origin": self.origin}))

    def event_time(self, event: Event) -> float:
        """Unix time ``event`` happens at."""
        return self.epoch + event.at_s / self.speed

    def start_clock_now(self) -> None:
        """On a first run, start the story now (after emulators and enrollment) rather than
        when the fleet was built: on a slow machine building and enrolling ~45 hosts can take
        longer than the first event's offset, which would then land before a host's first
        report (no version change seen, no risky-upgrade alert). A re-run keeps its epoch."""
        if self.fresh:
            self.epoch = time.time()
            self._save_epoch()
            self.fresh = False

    def skip_ahead(self, seconds: float) -> None:
        """Jump the story ``seconds`` ahead: the epoch moves back (kept in ``epoch.json``,
        so a re-run agrees), every event falls due that much earlier and the next round
        applies the due ones, dated at their now past time.

        Tests drive the story with it instead of sleeping until an event's wall-clock time:
        an event a few seconds after the epoch would otherwise race the fleet's own start-up
        (emulators, enrollment), which takes longer than that on a loaded machine.
        """
        self.epoch -= max(0.0, seconds)
        self._save_epoch()

    def settle(self, now: float) -> None:
        """Switch to :data:`STEADY_INTERVAL_S` once the timeline is over (final state held)."""
        last = max((e.at_s for e in self.timeline), default=0.0)
        if now < self.epoch + (last + SETTLE_AFTER_S) / self.speed:
            return
        steady = max(2, round(STEADY_INTERVAL_S / self.speed))
        if steady != self.interval_s:
            log.info("story over: holding the final state, agents report every %d s", steady)
            self.interval_s = steady
            for node in self.nodes.values():
                node.interval_s = steady

    def apply_due(self, now: float, quiet: bool = False) -> list[Event]:
        """Apply every event due by ``now`` (in order, dated at their own time)."""
        done = []
        for i, event in enumerate(self.timeline):
            at = self.event_time(event)
            if i in self.applied or at > now or event.host not in self.nodes:
                continue
            apply(event, self.nodes[event.host], at)
            self.applied.add(i)
            done.append(event)
            if not quiet:
                log.info("timeline +%.0fs %s: %s", at - self.epoch, event.host, event.text)
        return done

    def enroll(self, server_url: str, secret: str, skip: frozenset[str] = frozenset()) -> None:
        """Enroll every node not in ``skip`` (a fresh token written to its ``agent.toml``);
        the skipped ones keep the token a previous run wrote."""
        for name, node in self.nodes.items():
            if name not in skip:
                node.enroll(server_url, secret)

    def run_round(self, stop: threading.Event | None = None) -> dict[str, dict]:
        """Apply due events, then one agent cycle per reporting node (sequentially)."""
        self.apply_due(time.time())
        self.settle(time.time())
        out = {}
        for name, node in self.nodes.items():
            if stop is not None and stop.is_set():
                break
            if not node.silent:
                out[name] = node.cycle(stop)
        return out

    def run(self, server_url: str, *, once: bool = False, duration: float | None = None,
            stop: threading.Event | None = None,
            between_rounds: Callable[[], None] | None = None) -> int:
        """Play rounds until ``stop``, ``duration`` seconds, or one round with ``once``.

        Returns the number of rounds played. Stops by itself when the dashboard has been
        unreachable for :data:`GIVE_UP_AFTER_S` seconds.
        """
        stop = stop or threading.Event()
        deadline = time.monotonic() + duration if duration else None
        rounds, unreachable_since = 0, None
        while not stop.is_set():
            started = time.monotonic()
            if dashboard_up(server_url):
                unreachable_since = None
                summary = self.run_round(stop)
                rounds += 1
                log.info("round %d: %d reports, outcomes %s", rounds, len(summary),
                         sorted({str(s.get("outcome")) for s in summary.values()}))
                if between_rounds:
                    between_rounds()
            else:
                unreachable_since = unreachable_since or started
                if started - unreachable_since > GIVE_UP_AFTER_S:
                    log.warning("dashboard %s unreachable for %ds: stopping", server_url,
                                GIVE_UP_AFTER_S)
                    break
            if once or (deadline and time.monotonic() >= deadline):
                break
            wait = self.interval_s - (time.monotonic() - started)
            if deadline:
                wait = min(wait, deadline - time.monotonic())
            stop.wait(max(0.0, wait))
        return rounds

    def close(self) -> None:
        """Stop every emulator (in parallel: each shutdown waits for its poll loop)."""
        pool = ThreadPoolExecutor(max_workers=16)
        try:
            # Each stop is bounded (demo.emulator.stop_server); the overall wait is too.
            futures_wait([pool.submit(node.stop) for node in self.nodes.values()],
                         timeout=CLOSE_TIMEOUT_S)
        finally:
            pool.shutdown(wait=False, cancel_futures=True)


def dashboard_up(server_url: str) -> bool:
    """True when ``GET /api/v1/health`` answers 200 within 5 s."""
    try:
        return httpx.get(server_url.rstrip("/") + "/api/v1/health", timeout=5.0,
                         trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False
