"""Turning the real command lines of ``demo/data/cases/reports`` into fake-node processes.

Rules from ``demo/data/cases/README.md``: a ``docker run ... IMAGE ARGS`` line becomes the
container's server process with ``container_image`` set; a bare image name followed
by args (Kubernetes) likewise; a ``vllm bench`` line is not a server. Images older
than vLLM PR #25967 (2025-10-02, vllm-facts.md 3.1) start the api_server module, newer
ones ``vllm serve`` through the console script.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from fa_fakenode import FakeNode, ServerPids

from demo.paths import metrics_dir, reports_dir

CASES_DIR = reports_dir()  # FileNotFoundError (collection error) when the data is missing
METRICS_DIR = metrics_dir()

_DOCKER_NO_VALUE = {"-d", "-i", "-t", "-it", "-itd", "-dit", "--rm", "--privileged",
                    "--detach", "--interactive", "--tty", "--init"}
_OLD_ENTRYPOINT = re.compile(r":v0\.(\d+)\.")
_VERSION = re.compile(r"(\d+\.\d+\.\d+[0-9A-Za-z.+]*)")


@dataclass
class CaseServer:
    """One case turned into a server on the fake node."""

    case: str
    argv: list[str]  # the kernel argv the fake process has
    pids: ServerPids
    version: str
    image: str | None = None
    ns: str | None = None
    metrics_file: Path | None = None
    extra: dict = field(default_factory=dict)


def load_cases() -> list[dict]:
    """Every case report (name, argv, env, vllm_version...)."""
    out = []
    for path in sorted(CASES_DIR.glob("*.json")):
        data = json.loads(path.read_text())
        data["case"] = path.stem
        out.append(data)
    return out


def case_version(text: str) -> str:
    """A version-looking token from the case's free-text ``vllm_version``."""
    match = _VERSION.search(text or "")
    return match.group(1) if match else "0.22.0"


def split_docker(argv: list[str]) -> tuple[str, list[str], dict[str, str], dict[int, int]]:
    """``docker run OPTS IMAGE ARGS`` -> (image, args, -e env, -p host->container ports)."""
    i = argv.index("run") + 1
    env: dict[str, str] = {}
    ports: dict[int, int] = {}
    while i < len(argv) and argv[i].startswith("-"):
        opt = argv[i]
        if opt in _DOCKER_NO_VALUE or "=" in opt:
            i += 1
            continue
        value = argv[i + 1]
        if opt in ("-e", "--env"):
            key, _, val = value.partition("=")
            env[key] = val
        if opt in ("-p", "--publish"):
            host, _, cont = value.rpartition(":")
            ports[int(cont)] = int(host.rsplit(":", 1)[-1])
        i += 2
    return argv[i], argv[i + 1:], env, ports


def container_argv(image: str | None, args: list[str]) -> list[str]:
    """Kernel argv of the image's entrypoint process."""
    old = image and _OLD_ENTRYPOINT.search(image) and int(_OLD_ENTRYPOINT.search(image)[1]) < 11
    if old or (image or "").endswith(":latest"):
        return ["python3", "-m", "vllm.entrypoints.openai.api_server", *args]
    return ["/usr/bin/python3", "/usr/local/bin/vllm", "serve", *args]


def add_case(node: FakeNode, case: dict, metrics: Path | None) -> CaseServer | None:
    """Add the server of one case to ``node``; None for a non-server line (``vllm bench``)."""
    argv, env = list(case["argv"]), dict(case.get("env") or {})
    version = case_version(case.get("vllm_version", ""))
    if argv[:2] == ["vllm", "bench"]:
        return None
    tp = _tp(argv)
    if argv[0] == "docker" or "vllm-openai" in argv[0] or argv[0].startswith("<"):
        return _container_case(node, case, argv, env, version, tp, metrics)
    venv = f"/opt/venv-{case['case'][:3]}"  # one venv per server, as operators do
    # `python -m vllm.entrypoints.openai.api_server` stays as typed (python found via PATH)
    kernel = [f"{venv}/bin/python3", f"{venv}/bin/vllm", *argv[1:]] if argv[0] == "vllm" \
        else argv
    env.setdefault("PATH", f"{venv}/bin:/usr/bin:/bin")
    env.setdefault("HOME", "/home/ml")
    node.install_vllm(None, venv, version)
    pids = node.add_vllm(kernel, tp=tp, env=env, cwd="/home/ml", listen=(_port(argv),))
    return CaseServer(case["case"], kernel, pids, version, metrics_file=metrics)


def _container_case(node: FakeNode, case: dict, argv: list[str], env: dict, version: str,
                    tp: int, metrics: Path | None) -> CaseServer:
    ports: dict[int, int] = {}
    if argv[0] == "docker":
        image, args, denv, ports = split_docker(argv)
        env.update(denv)
    elif argv[0].startswith("<"):
        image, args = None, argv[1:]
    else:
        image, args = argv[0], argv[1:]
    cid = hashlib.sha256(case["case"].encode()).hexdigest()
    kernel = container_argv(image, args)
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.setdefault("HOME", "/root")
    node.install_vllm(cid, "/usr/local", version, site="lib/python3.12/dist-packages")
    cgroup = node.docker_container(cid, image, ports)
    pids = node.add_vllm(kernel, tp=tp, env=env, cwd="/vllm-workspace", ns=cid,
                         listen=(_port(args),), cgroup=cgroup)
    return CaseServer(case["case"], kernel, pids, version, image=image, ns=cid,
                      metrics_file=metrics, extra={"ports": ports})


def _port(args: list[str]) -> int:
    for i, word in enumerate(args):
        if word == "--port":
            return int(args[i + 1])
        if word.startswith("--port="):
            return int(word.split("=", 1)[1])
    return 8000


def _tp(args: list[str]) -> int:
    for i, word in enumerate(args):
        flag, _, value = word.partition("=")
        if flag.replace("_", "-") in ("--tensor-parallel-size", "-tp"):
            try:
                return int(value or args[i + 1])
            except (ValueError, IndexError):
                return 1
    return 1


def build_case_node(node: FakeNode) -> list[CaseServer]:
    """Every server case on one node, with a real /metrics capture each (round robin)."""
    captures = sorted(METRICS_DIR.glob("*.prom"))
    servers = []
    for i, case in enumerate(load_cases()):
        server = add_case(node, case, captures[i % len(captures)])
        if server:
            servers.append(server)
    return servers
