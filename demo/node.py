"""A running simulated node: its ``/proc`` tree, vLLM emulators, NVML reading and agent.

:class:`SimNode` turns a :class:`~demo.specs.HostSpec` into files under
``<base>/<hostname>/`` (``root/`` for the filesystem the agent reads with ``--root``,
``nvml.json`` for ``--gpu-source``, ``agent.toml``, ``spool/``) and one
:class:`~demo.emulator.Emulator` per server. Each node's emulators bind the
server's own port on a loopback address of their own (``127.0.1.N``), so two nodes can
both serve port 8000 and the dashboard sees ``port:8000`` as on a real node; where that
address is taken on that port, a few random 127.128.0.0/9 addresses are tried, and where
none can be bound (non-Linux loopback), a free port on 127.0.0.1 is used.
The agent reaches a server through a ``[[servers]] match_port`` override, the
documented way to point the agent at a server behind NAT or a proxy.

Collection and delivery are the real agent's (:class:`fleet_agent.runner.Agent`).
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from demo import fakesystemd
from demo.emulator import Behaviour, Emulator
from demo.procnode import ProcNode, ServerPids
from demo.specs import HostSpec, ServerSpec, option, place_server
from demo.traffic import TrafficState
from fleet_agent import config as agent_config
from fleet_agent import deliver, failed_starts, runner

log = logging.getLogger("demo")

#: The checkout the fake systemd wrappers import from (demo/node.py -> repo root).
REPO = Path(__file__).resolve().parents[1]

#: Typical H100/GB10 power draw under load as a share of the limit (assumed).
LOAD_POWER_SHARE = 0.86


@dataclass
class RunningServer:
    """A server's current spec, processes, metric state and emulator."""

    spec: ServerSpec
    pids: ServerPids
    started_at: float
    behaviour: Behaviour
    emulator: Emulator


def cache_labels(server: ServerSpec) -> dict[str, str]:
    """``cache_config_info`` labels: flags from argv, KV capacity only where a seed gives it
    (``"None"`` otherwise, vLLM's own spelling of an unset value, never a template's)."""
    labels = {"gpu_memory_utilization": option(server.argv, "--gpu-memory-utilization") or "0.9",
              "cache_dtype": option(server.argv, "--kv-cache-dtype") or "auto",
              "kv_cache_size_tokens": "None", "num_gpu_blocks": "None",
              "kv_cache_max_concurrency": "None"}
    return {**labels, **dict(server.cache)}


#: Other loopback addresses (random, in 127.128.0.0/9, away from the nodes' 127.0.x.y) tried
#: for a server's port when the node's own address is taken on it.
SPARE_LOOPBACK_TRIES = 8


def loopback_address(index: int) -> str:
    """``127.0.1.N`` for node ``index`` (0-based), spilling into 127.0.2.x after 254."""
    return f"127.0.{1 + index // 254}.{1 + index % 254}"


class SimNode:
    """One simulated node. ``epoch``: Unix time the initial servers are dated from."""

    def __init__(self, spec: HostSpec, base: Path, index: int, epoch: float,
                 interval_s: int = 10):
        self.spec = spec
        self.dir = base / spec.hostname
        self.index = index
        self.epoch = epoch
        self.interval_s = interval_s
        self.silent = False
        #: Live probes the agent runs next cycle, and its last results: kept here
        #: because each cycle builds a fresh Agent. A host spec with ``probes`` starts with
        #: the request an operator's "turn probes on" would bring in the first answer.
        self.probe_requests: dict[str, list[str]] = {"*": list(spec.probes)} \
            if spec.probes else {}
        self.probe_memory: dict[str, list[dict[str, Any]]] = {}
        self.servers: dict[str, RunningServer] = {}
        #: systemd units that fail to start (demo.fakesystemd), newest last.
        self.failed_units: list[dict[str, Any]] = []
        self.dir.mkdir(parents=True, exist_ok=True)
        self.proc = ProcNode(self.dir / "root", spec.hostname, spec.machine_id,
                             boot_time=epoch - 86400 - 3600 * index)
        for number, server in enumerate(spec.servers):
            self.start_server(server, epoch - 3600 - 97 * index - 13 * number)

    # --- servers ------------------------------------------------------------------------

    def start_server(self, server: ServerSpec, started_at: float) -> RunningServer:
        """Write the server's files and processes and start (or reuse) its emulator."""
        pids = place_server(self.proc, server, started_at)
        state = TrafficState(model_name=server.model_id, version=server.version,
                             workload=server.workload, started_at=started_at,
                             max_model_len=server.max_model_len or 65536,
                             spec_k=server.spec_k, cache=cache_labels(server),
                             seed=zlib.crc32(f"{self.spec.hostname}/{server.key}".encode()))
        state.advance(time.time())  # as if it had served since it started
        behaviour = Behaviour(version=server.version, model_id=server.model_id,
                              root=server.root, max_model_len=server.max_model_len,
                              state=state, api_key=server.api_key,
                              faults=set(server.faults))
        old = self.servers.get(server.key)
        emulator = old.emulator if old else self._listen(behaviour, server.port)
        emulator.httpd.behaviour = behaviour  # type: ignore[attr-defined]
        emulator.behaviour = behaviour
        running = RunningServer(server, pids, started_at, behaviour, emulator)
        self.servers[server.key] = running
        return running

    def _listen(self, behaviour: Behaviour, port: int) -> Emulator:
        # The server's own port keeps its slot on the dashboard (``port:8000``; a failed
        # start is put on the slot of its argv port), so when the node's address is taken
        # on that port (another simulator on this machine, an emulator still closing) a
        # few other loopback addresses are tried before a free port on 127.0.0.1.
        rng = random.Random()
        spares = [f"127.{rng.randint(128, 254)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"
                  for _ in range(SPARE_LOOPBACK_TRIES)]
        error: OSError | None = None
        for address in (loopback_address(self.index), *spares):
            try:
                return Emulator(behaviour, address, port)
            except OSError as exc:
                error = error or exc
        log.info("%s: cannot bind %s:%d (%s); using a free port on 127.0.0.1",
                 self.spec.hostname, loopback_address(self.index), port, error)
        return Emulator(behaviour, "127.0.0.1", 0)

    def replace_server(self, server: ServerSpec, at: float) -> RunningServer:
        """The server exits and starts again as ``server`` (new pid, start time ``at``)."""
        old = self.servers[server.key]
        self.proc.remove(old.pids)
        self.spec = self.spec.with_server(server)
        return self.start_server(server, at)

    def fail_start(self, key: str, journal: list[str], at: float) -> None:
        """The server ``key`` is restarted by its systemd unit and, from ``at`` on, exits
        during start-up with ``journal``; systemd restarts it every third agent interval."""
        running = self.servers.pop(key)
        self.proc.remove(running.pids)
        running.emulator.stop()
        self.failed_units.append({"id": f"vllm-{key}.service", "argv": list(running.spec.argv),
                                  "failed_since": at,
                                  "restart_every_s": max(0.5, self.interval_s / 3),
                                  "journal": list(journal)})
        bin_dir = self.dir / "bin"
        bin_dir.mkdir(exist_ok=True)
        state = self.dir / "systemd.json"
        state.write_text(json.dumps({"units": self.failed_units}))
        for tool in ("systemctl", "journalctl"):
            (bin_dir / tool).write_text(fakesystemd.wrapper(tool, state, REPO))
            (bin_dir / tool).chmod(0o755)

    def failed_start_sources(self) -> failed_starts.Sources | None:
        """The fake systemd once a unit failed (None before: nothing to read)."""
        if not self.failed_units:
            return None
        return failed_starts.Sources(path=str(self.dir / "bin"), docker_sockets=())

    def install(self, key: str, version: str) -> None:
        """``pip install vllm==version`` next to the running server (no restart)."""
        running = self.servers[key]
        server = running.spec.changed(installed=version)
        ns = server.container.container_id if server.container else None
        self.proc.install_vllm(ns, server.prefix, version, site=server.site)
        running.spec = server
        self.spec = self.spec.with_server(server)

    def set_workload(self, key: str, workload: Any) -> None:
        """Change the traffic a server sees from now on (load ramp)."""
        running = self.servers[key]
        with running.behaviour.lock:
            running.behaviour.state.advance(time.time())
            running.behaviour.state.workload = workload
        running.spec = running.spec.changed(workload=workload)

    def stop(self) -> None:
        """Stop every emulator of this node."""
        for running in self.servers.values():
            running.emulator.stop()

    # --- NVML and agent -------------------------------------------------------------

    def nvml_reading(self) -> dict[str, Any]:
        """A recorded NVML reading: GPUs with memory/power per the servers' load, and the
        processes holding them (EngineCore at TP=1, ``Worker_TP<i>`` at TP>1)."""
        gpus, processes = [], []
        for index, gpu in enumerate(self.spec.gpus):
            user = next((s for s in self.servers.values() if index in s.spec.gpus), None)
            total = gpu.memory_total_bytes
            used = int(total * user.spec.mem_fraction) if user and total else None
            gpus.append({
                "index": index, "uuid": f"GPU-{self.spec.machine_id[:8]}-{index:04d}-sim",
                "name": gpu.name, "memory_total_bytes": total, "memory_used_bytes": used,
                "compute_capability": gpu.compute_capability,
                "utilization_gpu_pct": 96 if user else 0, "temperature_c": 62 if user else 34,
                "power_draw_w": round(gpu.power_limit_w * (LOAD_POWER_SHARE if user else 0.1), 2)
                if gpu.power_limit_w else None,
                "power_limit_w": gpu.power_limit_w, "ecc_errors_uncorrected": 0})
            if user:
                holders = user.pids.children[2:] if user.spec.tp > 1 else [user.pids.engine]
                rank = user.spec.gpus.index(index)
                pid = holders[min(rank, len(holders) - 1)]
                processes.append({"gpu_uuid": gpus[-1]["uuid"], "pid": pid,
                                  "used_memory_bytes": used})
        error = self.spec.gpu_error
        return {"driver_version": "580.95.05", "cuda_driver_version": "13.0", "gpus": gpus,
                "processes": processes, "error": error}

    def write_nvml(self) -> Path:
        """Write :meth:`nvml_reading` to ``nvml.json`` (what ``--gpu-source`` reads)."""
        path = self.dir / "nvml.json"
        path.write_text(json.dumps(self.nvml_reading(), indent=1))
        return path

    @property
    def config_path(self) -> Path:
        """The agent's config file (``agent.toml``, mode 0600: it holds the token)."""
        return self.dir / "agent.toml"

    def agent_config(self, server_url: str | None, token: str | None) -> agent_config.AgentConfig:
        """The agent config: dashboard URL/token, interval, spool and one URL override per
        server (``match_port`` = the port the process listens on)."""
        overrides = [agent_config.ServerOverride(match_port=r.spec.port,
                                                 base_url=r.emulator.base_url)
                     for r in self.servers.values()]
        return agent_config.AgentConfig(
            server_url=server_url, token=token, interval_s=self.interval_s,
            spool_dir=str(self.dir / "spool"), gpu_source=str(self.dir / "nvml.json"),
            root=str(self.dir / "root"), labels=dict(self.spec.labels), servers=overrides)

    def enroll(self, server_url: str, secret: str) -> None:
        """``fleet-agent enroll``: exchange ``secret`` for a token, write ``agent.toml``."""
        token = deliver.enroll(server_url, secret, self.spec.machine_id, self.spec.hostname)
        agent_config.save(self.agent_config(server_url, token), self.config_path)

    def saved_token(self, server_url: str) -> str | None:
        """The token a previous run wrote to ``agent.toml`` for this ``server_url``, or None."""
        try:
            saved = agent_config.load(self.config_path)
        except (OSError, ValueError):
            return None
        same = str(saved.server_url).rstrip("/") == server_url.rstrip("/")
        return saved.token if same and saved.token else None

    def agent(self) -> runner.Agent:
        """The real agent for this node (config re-read, so URL overrides stay current)."""
        saved = agent_config.load(self.config_path)
        cfg = self.agent_config(saved.server_url, saved.token)
        return runner.Agent(config=cfg, root=Path(cfg.root), gpu_source=cfg.gpu_source,
                            sources=self.failed_start_sources())

    def cycle(self, stop: threading.Event | None = None) -> dict[str, Any]:
        """One ``fleet-agent`` cycle: collect, spool, deliver. Returns the drain summary."""
        self.write_nvml()
        agent = self.agent()
        agent.probe_requests, agent.probe_memory = self.probe_requests, self.probe_memory
        deliverer = agent.deliverer(stop or threading.Event())
        try:
            return agent.cycle(deliverer)
        finally:
            self.probe_requests = agent.probe_requests
            if deliverer is not None:
                deliverer.close()
