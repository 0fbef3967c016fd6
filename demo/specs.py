"""Declarative description of simulated hosts and their vLLM servers.

A :class:`HostSpec` is what a node *is* (GPUs, servers); :mod:`demo.node`
turns it into a ``/proc`` tree, emulators and a recorded NVML reading. Specs are plain
data so scenarios can derive a changed server (upgrade, TP change) with
:meth:`ServerSpec.changed`. :func:`place_server` writes one server onto a
:class:`~demo.procnode.ProcNode` (the demo's nodes and the agent tests' node alike).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, replace
from typing import Any

from demo.procnode import ProcNode, ServerPids
from demo.traffic import Workload

H100_NAME = "NVIDIA H100 80GB HBM3"
#: NVML ``memory.total`` of an H100 80GB HBM3 (tests/agent/fixtures/nvml_h100x2.json).
H100_BYTES = 85520809984
GB10_NAME = "NVIDIA GB10"
#: The 121 GB unified-memory ceiling of the GB10 card (seed 003 "Two walls hit at once").
GB10_BYTES = 121 * 10**9
_SPEC_K = re.compile(r'num_speculative_tokens"?\s*[:=]?\s*"?(\d+)')


@dataclass(frozen=True)
class GpuSpec:
    """One GPU as a recorded NVML reading shows it. Memory in bytes, power in watts."""

    name: str
    memory_total_bytes: int | None
    compute_capability: str | None = None
    power_limit_w: float | None = None
    unified: bool = False


@dataclass(frozen=True)
class Container:
    """A Docker container: image tag and published ports (container port -> host port)."""

    image: str | None
    ports: tuple[tuple[int, int], ...] = ()
    name: str = ""

    @property
    def container_id(self) -> str:
        """A stable 64-hex container id derived from the image and name."""
        return hashlib.sha256(f"{self.name}|{self.image}".encode()).hexdigest()


@dataclass(frozen=True)
class ServerSpec:
    """One vLLM API server.

    ``argv``: the kernel argv of the server process (what ``/proc/PID/cmdline`` shows).
    ``port``: the port it listens on (inside its container). ``installed``: the vLLM
    version on disk when it differs from the running ``version``. ``files``: in-namespace
    path -> content (chat templates). ``hf``: HF cache snapshots as
    ``(cache_dir, repo, commit, {file: content})``. ``gpus``: indices of the host GPUs
    its processes hold; ``mem_fraction``: NVML used memory per GPU as a share of total.
    """

    key: str
    argv: tuple[str, ...]
    version: str
    model_id: str
    root: str
    workload: Workload
    port: int = 8000
    max_model_len: int | None = None
    tp: int = 1
    installed: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    cwd: str = "/root"
    prefix: str = "/opt/vllm"
    site: str = "lib/python3.12/site-packages"
    container: Container | None = None
    files: tuple[tuple[str, str | bytes], ...] = ()
    hf: tuple[tuple[str, str, str, tuple[tuple[str, str | bytes], ...]], ...] = ()
    gpus: tuple[int, ...] = (0,)
    mem_fraction: float = 0.9
    cache: tuple[tuple[str, str], ...] = ()
    api_key: str | None = None
    #: Live-probe failure shapes its emulator shows (``demo.emulator.FAULTS``).
    faults: tuple[str, ...] = ()

    def changed(self, **changes: Any) -> ServerSpec:
        """A copy with ``changes`` applied."""
        return replace(self, **changes)

    @property
    def spec_k(self) -> int:
        """``num_speculative_tokens`` from argv (JSON or dotted form), 0 without spec decode."""
        text = " ".join(self.argv)
        if "speculative" not in text:
            return 0
        match = _SPEC_K.search(text)
        return int(match.group(1)) if match else len(self.workload.per_position)


@dataclass(frozen=True)
class HostSpec:
    """One simulated node: hostname, GPUs, servers and a one-line role for the logs."""

    hostname: str
    gpus: tuple[GpuSpec, ...]
    servers: tuple[ServerSpec, ...]
    role: str = ""
    labels: tuple[tuple[str, str], ...] = ()
    gpu_error: str | None = None
    #: Live probes its agent runs from the start, as if an operator enabled them.
    probes: tuple[str, ...] = ()

    @property
    def machine_id(self) -> str:
        """A stable 32-hex ``/etc/machine-id`` derived from the hostname."""
        return hashlib.sha256(f"fleet-sim:{self.hostname}".encode()).hexdigest()[:32]

    def with_server(self, server: ServerSpec) -> HostSpec:
        """A copy where the server with ``server.key`` is replaced."""
        servers = tuple(server if s.key == server.key else s for s in self.servers)
        return replace(self, servers=servers)


def option(argv: tuple[str, ...] | list[str], *names: str) -> str | None:
    """Last value of ``--name value`` / ``--name=value`` (dash/underscore alike)."""
    wanted = {n.replace("_", "-") for n in names}
    value = None
    for i, word in enumerate(argv):
        flag, eq, rest = word.partition("=")
        if flag.replace("_", "-") in wanted:
            value = rest if eq else (argv[i + 1] if i + 1 < len(argv) else None)
    return value


def int_option(argv: tuple[str, ...] | list[str], *names: str) -> int | None:
    """:func:`option` as an int, None when absent or not a number."""
    value = option(argv, *names)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def spec_config(k: int, method: str, model: str) -> str:
    """A ``--speculative-config`` JSON value."""
    return json.dumps({"method": method, "model": model, "num_speculative_tokens": k},
                      separators=(",", ":"))


def stand_in_template(label: str, size: int) -> bytes:
    """A chat template of exactly ``size`` bytes that says it is a stand-in.

    The seed publishes only 8-hex prefixes/suffixes of the real templates' sha256
    (seed 000, "Three load-bearing facts" #3), so no file we write can hash to them; the
    dashboard therefore sees an unknown (unvetted) template here, which is the truth.
    """
    head = (f"{{# fleet simulator stand-in for: {label}. Same size as the real file, "
            f"different bytes: its sha256 is not the seed's. #}}\n"
            "{{ bos_token }}{% for m in messages %}<|turn>{{ m.role }}\n"
            "{{ m.content }}<turn|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|turn>model\n{% endif %}\n").encode()
    filler = b"{# padding #}\n"
    body = head + filler * ((size - len(head)) // len(filler))
    return body + b" " * (size - len(body))


def place_server(proc: ProcNode, server: ServerSpec, started: float | None = None) -> ServerPids:
    """Write ``server`` onto ``proc``: its container (cgroup and published ports), vLLM install,
    files, HF cache snapshots and process tree, listening on ``server.port``. ``started``:
    Unix time the processes started (None: the node's default start time)."""
    ns = server.container.container_id if server.container else None
    cgroup = "0::/user.slice\n"
    if server.container:
        cgroup = proc.docker_container(ns, server.container.image, dict(server.container.ports))
    proc.install_vllm(ns, server.prefix, server.installed or server.version, site=server.site)
    for path, content in server.files:
        proc.write_file(ns, path, content)
    for cache, repo, commit, files in server.hf:
        proc.hf_snapshot(ns, cache, repo, commit, dict(files))
    return proc.add_vllm(list(server.argv), tp=server.tp, env=dict(server.env), cwd=server.cwd,
                         ns=ns, listen=(server.port,), cgroup=cgroup, started=started,
                         exe="/usr/bin/python3.12")
