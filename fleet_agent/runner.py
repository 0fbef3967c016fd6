"""The agent's cycle (collect, spool, deliver) and the ``run`` loop with clean shutdown."""

from __future__ import annotations

import logging
import signal
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from fleet_agent import collect, deliver, failed_starts, metrics_compact
from fleet_agent.config import AgentConfig
from fleet_agent.schema import Report
from fleet_agent.spool import Spool, StateFile

log = logging.getLogger("fleet_agent")


@dataclass
class Agent:
    """Config plus the hooks (``root``, ``gpu_source``) a cycle runs with."""

    config: AgentConfig
    root: Path
    gpu_source: str
    #: Servers of the previous cycle ("a vLLM process died since"), kept across cycles.
    memory: failed_starts.ProcessMemory = field(default_factory=failed_starts.ProcessMemory)
    #: Failed-start sources to read instead of this machine's (the simulator's fake systemd).
    sources: failed_starts.Sources | None = None
    #: Live probes asked for by the dashboard's last answers, run next cycle.
    probe_requests: dict[str, list[str]] = field(default_factory=dict)
    #: Last probe results per server identity, re-sent with each report.
    probe_memory: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    #: Which servers' raw /metrics text goes with the next report (compact form always).
    text_policy: metrics_compact.TextPolicy | None = None

    def __post_init__(self) -> None:
        if self.text_policy is None:
            self.text_policy = metrics_compact.TextPolicy(every=self.config.metrics_text_every)

    def state(self) -> StateFile:
        """The state file next to the spool."""
        return StateFile(self.config.state_path)

    def spool(self) -> Spool:
        """The spool with the configured bounds."""
        return Spool(Path(self.config.spool_dir), self.config.spool_max_reports,
                     self.config.spool_max_bytes, self.state())

    def build_report(self, spool: Spool | None = None) -> Report:
        """Collect one report; spool counters are included when a spool is given."""
        inp = collect.CycleInput(config=self.config, root=self.root, gpu_source=self.gpu_source,
                                 spool_dropped=spool.dropped() if spool else 0,
                                 spool_depth=spool.depth() if spool else None,
                                 failed_start_sources=self.failed_start_sources(),
                                 process_memory=self.memory,
                                 probe_requests=self.probe_requests,
                                 probe_memory=self.probe_memory,
                                 text_policy=self.text_policy)
        report = collect.collect(inp)
        self.probe_requests = {}  # run once per request; the dashboard asks again when due
        return report

    def failed_start_sources(self) -> failed_starts.Sources | None:
        """systemd and the Docker/Podman sockets of this node; none when the agent reads a
        recorded filesystem (``--root`` other than ``/``): they would describe this machine."""
        if self.sources is not None:
            return self.sources
        return failed_starts.Sources() if self.root == Path("/") else None

    def cycle(self, deliverer: deliver.Deliverer | None) -> dict[str, Any]:
        """Collect, spool and drain once. Returns the drain summary (or a no-server note)."""
        spool = self.spool()
        report = self.build_report(spool)
        body = report.model_dump_json(exclude_none=False).encode("utf-8")
        spool.put(str(report.report_id), deliver.gzip_body(body))
        log.info("spooled report %s (%d servers, %d bytes)", report.report_id,
                 len(report.servers), len(body))
        self.state().update(last_collect=summarize(report))
        if deliverer is None:
            return {"outcome": "no server_url/token configured", "pending": spool.depth()}
        summary = deliverer.drain(budget_s=max(1.0, self.config.interval_s * 0.8))
        self.probe_requests.update(deliverer.probe_requests)
        deliverer.probe_requests.clear()
        if self.text_policy is not None:
            self.text_policy.request(sorted(deliverer.metrics_text_requests))
            self.text_policy.dashboard_reads_compact |= deliverer.reads_compact
        deliverer.metrics_text_requests.clear()
        return summary

    def deliverer(self, stop: threading.Event) -> deliver.Deliverer | None:
        """A deliverer when the config has a server URL and a token."""
        if not (self.config.server_url and self.config.token):
            return None
        return deliver.Deliverer(self.spool(), self.config.server_url, self.config.token, stop)


def summarize(report: Report) -> dict[str, Any]:
    """A short description of a report for ``status`` (no argv, no metrics)."""
    return {
        "at": report.collected_at.isoformat(),
        "report_id": str(report.report_id),
        "gpus": len(report.gpus),
        "gpu_error": report.gpu_error,
        "servers": [{"pid": s.pid, "base_url": s.base_url, "vllm_version": s.vllm_version,
                     "installed_vllm_version": s.installed_vllm_version,
                     "models": [m.id for m in s.models], "errors": len(s.errors)}
                    for s in report.servers],
    }


def wait_and_watch(agent: Agent, stop: threading.Event, started: float) -> None:
    """Wait out the cycle interval, checking the tracked vLLM servers every
    :data:`failed_starts.WATCH_S` seconds (a listing of ``/proc`` and the cmdline of new pids
    only), so that a server that dies in 10 s is read back before its log is gone."""
    sources = agent.failed_start_sources()
    journalctl = sources.journalctl if sources is not None else None
    while not stop.is_set():
        left = agent.config.interval_s - (time.monotonic() - started)
        if left <= 0:
            return
        if stop.wait(min(left, failed_starts.WATCH_S)):
            return
        try:
            agent.memory.watch(agent.root, journalctl)
        except OSError:
            log.exception("watching vLLM servers failed")


def install_signal_handlers(stop: threading.Event) -> None:
    """SIGTERM/SIGINT set ``stop``: the loop finishes (or abandons) the current call and exits."""
    def handler(signum: int, _frame: Any) -> None:
        log.info("signal %s: stopping after the current step", signum)
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def beat(path: Path | None) -> None:
    """Touch the heartbeat file ``path`` (create it, or set its mtime to now).

    Written at start-up and at the end of every cycle, failed ones included: a cycle that
    raised still shows a loop that runs, while a hung one (a read that never returns) stops
    the heartbeat. A liveness check compares the file's age with a few intervals (the
    DaemonSet's exec probe: deploy/kubernetes/agent). An unwritable path is logged, never
    fatal.
    """
    if path is None:
        return
    try:
        path.touch()  # an existing file gets its mtime set to now
    except OSError as exc:
        log.warning("cannot write the heartbeat file %s: %s", path, exc)


def run_forever(agent: Agent, stop: threading.Event, max_cycles: int | None = None,
                heartbeat: Path | None = None) -> int:
    """Cycle every ``interval_s`` seconds until ``stop`` is set; the spool stays on disk.
    ``heartbeat``: a file touched after each cycle (:func:`beat`)."""
    deliverer = agent.deliverer(stop)
    cycles = 0
    beat(heartbeat)  # started: a first cycle that hangs ages it like any other
    try:
        while not stop.is_set():
            started = time.monotonic()
            try:
                summary = agent.cycle(deliverer)
                log.info("cycle done: %s", summary)
            except Exception:  # one bad cycle must not end the agent
                log.exception("cycle failed")
                agent.state().update(last_error=datetime.now(timezone.utc).isoformat())
            beat(heartbeat)
            cycles += 1
            if max_cycles is not None and cycles >= max_cycles:
                break
            wait_and_watch(agent, stop, started)
    finally:
        if deliverer is not None:
            deliverer.close()
    return 0
