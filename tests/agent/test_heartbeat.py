"""The agent's heartbeat file and the DaemonSet's liveness probe on it: a running agent
touches the file each cycle and passes the probe's own shell command; an agent whose cycle
hangs stops touching it and fails the probe once the file is older than the probe allows."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import yaml
from fa_fakenode import FakeNode

from fleet_agent import config as agent_config
from fleet_agent import failed_starts, runner
from fleet_agent.cli import main

REPO = Path(__file__).parents[2]
DAEMONSET = REPO / "deploy/kubernetes/agent/fleet-agent-daemonset.yaml"


def _agent_container() -> dict:
    docs = [d for d in yaml.safe_load_all(DAEMONSET.read_text()) if d]
    pod = next(d for d in docs if d["kind"] == "DaemonSet")["spec"]["template"]["spec"]
    return next(c for c in pod["containers"] if c["name"] == "fleet-agent")


def _probe(heartbeat: Path) -> int:
    """Run the DaemonSet's liveness command with its path pointed at ``heartbeat``."""
    agent = _agent_container()
    path = agent["args"][agent["args"].index("--heartbeat-file") + 1]
    command = [part.replace(path, str(heartbeat))
               for part in agent["livenessProbe"]["exec"]["command"]]
    return subprocess.run(command, timeout=30).returncode


def test_each_cycle_touches_the_heartbeat_and_the_probe_passes(tmp_path):
    node = FakeNode(tmp_path / "root")
    cfg = agent_config.AgentConfig(spool_dir=str(tmp_path / "spool"), interval_s=1)
    agent_config.save(cfg, tmp_path / "c.toml")
    heartbeat = tmp_path / "heartbeat"
    assert main(["run", "--config", str(tmp_path / "c.toml"), "--root", str(node.root),
                 "--gpu-source", "none", "--cycles", "1",
                 "--heartbeat-file", str(heartbeat)]) == 0
    assert time.time() - heartbeat.stat().st_mtime < 30
    assert _probe(heartbeat) == 0
    old = time.time() - 600  # ten minutes without a cycle
    os.utime(heartbeat, (old, old))
    assert _probe(heartbeat) != 0
    assert _probe(tmp_path / "never-written") != 0


def test_a_hung_cycle_stops_the_heartbeat(tmp_path):
    release = threading.Event()

    class Hung:
        """An agent whose second cycle blocks (a read that never returns)."""

        config = agent_config.AgentConfig(interval_s=0)
        calls = 0
        root = tmp_path
        memory = failed_starts.ProcessMemory()

        def deliverer(self, stop):
            return None

        def failed_start_sources(self):
            return None

        def cycle(self, deliverer):
            Hung.calls += 1
            if Hung.calls > 1:
                release.wait(30)
            return {}

    heartbeat = tmp_path / "heartbeat"
    stop = threading.Event()
    thread = threading.Thread(target=runner.run_forever, args=(Hung(), stop, 3, heartbeat))
    thread.start()
    deadline = time.monotonic() + 10
    while Hung.calls < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    beaten = heartbeat.stat().st_mtime
    time.sleep(1.2)
    assert heartbeat.stat().st_mtime == beaten  # stuck in cycle 2: no new beat
    release.set()
    thread.join(10)
    assert heartbeat.stat().st_mtime > beaten  # cycle 2 returned: beating again
