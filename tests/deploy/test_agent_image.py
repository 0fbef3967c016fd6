"""The agent image (deploy/kubernetes/Dockerfile.agent) installs what install.sh installs:
the hash lock with --require-hashes, then the agent with --no-deps, on a base pinned by
digest; the build script tags it with the agent's version, the tag the manifests use."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import yaml

from fleet_agent import __version__

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy/kubernetes/Dockerfile.agent"
INSTALL_SH = ROOT / "fleet_agent/install.sh"
DAEMONSET = ROOT / "deploy/kubernetes/agent/fleet-agent-daemonset.yaml"


def _instructions() -> list[str]:
    """Dockerfile instructions, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    return [line.strip() for line in text.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def test_every_stage_starts_from_a_base_pinned_by_digest() -> None:
    lines = _instructions()
    args = dict(re.match(r"ARG (\w+)=(\S+)", line).groups() for line in lines
                if line.startswith("ARG ") and "=" in line)
    froms = [line.split()[1] for line in lines if line.startswith("FROM ")]
    assert len(froms) == 2
    for base in froms:
        image = args.get(base.strip("${}"), base)
        assert re.search(r"@sha256:[0-9a-f]{64}$", image), image


def test_the_image_installs_the_lock_with_hashes_then_the_agent_alone() -> None:
    run = " ".join(line for line in _instructions() if line.startswith("RUN "))
    lock = re.search(
        r"pip install (--require-hashes --only-binary :all:) -r \S*requirements\.lock", run)
    assert lock, run
    installer = INSTALL_SH.read_text()
    assert f"pip\" install --quiet {lock.group(1)} -r" in installer  # the same flags
    assert re.search(r"pip install --no-deps \S+\.whl", run)
    assert run.index("requirements.lock") < run.index("pip install --no-deps")
    assert "COPY fleet_agent/requirements.lock" in " ".join(_instructions())


def test_the_build_script_tags_the_agent_version_the_manifests_run(tmp_path) -> None:
    out = subprocess.run([str(ROOT / "deploy/kubernetes/build-agent-image.sh"), "--push"],
                         env={**os.environ, "DRY_RUN": "1", "IMAGE": "registry.local/agent"},
                         capture_output=True, text=True, timeout=30, check=True).stdout
    assert f"-t registry.local/agent:{__version__} ." in out
    assert f"push registry.local/agent:{__version__}" in out
    docs = [d for d in yaml.safe_load_all(DAEMONSET.read_text()) if d]
    pod = next(d for d in docs if d["kind"] == "DaemonSet")["spec"]["template"]["spec"]
    for container in pod["containers"] + pod["initContainers"]:
        assert container["image"].endswith(f":{__version__}"), container["image"]


def test_the_default_command_writes_the_heartbeat_the_probe_reads() -> None:
    cmd = next(line for line in _instructions() if line.startswith("CMD "))
    docs = [d for d in yaml.safe_load_all(DAEMONSET.read_text()) if d]
    pod = next(d for d in docs if d["kind"] == "DaemonSet")["spec"]["template"]["spec"]
    agent = next(c for c in pod["containers"] if c["name"] == "fleet-agent")
    path = agent["args"][agent["args"].index("--heartbeat-file") + 1]
    assert path in cmd and path in " ".join(agent["livenessProbe"]["exec"]["command"])
