"""Finding vLLM API-server processes and where they listen.

Launch forms and child processes: ``docs/vllm-facts.md`` sections 3.1-3.3.
A server is a process whose argv is ``<python> <bin>/vllm serve ...`` (console script),
``vllm serve ...``, ``<python> -m vllm.entrypoints.openai.api_server ...`` or
``<python> -m vllm.entrypoints.cli.main serve ...``, that is not a setproctitle child
(``VLLM::EngineCore``, ``VLLM::Worker_TP0``, ``VLLM::APIServer_1``), not a
multiprocessing spawn stub or resource tracker, and whose ancestors are not servers.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

from fleet_agent import kube, procfs

#: vLLM's default ``--port`` (vllm-facts.md 3.3, ``cli_args.py::FrontendArgs``).
DEFAULT_PORT = 8000

_PYTHON = re.compile(r"^(python|pypy)[0-9.]*$")
# setproctitle titles such as VLLM::EngineCore (the prefix is configurable, so any word).
_TITLE = re.compile(r"^[A-Za-z0-9_]+::")
_API_MODULES = ("vllm.entrypoints.openai.api_server",)
_CLI_MODULES = ("vllm.entrypoints.cli.main",)
_CGROUP_ID = re.compile(
    r"(?:docker[-/]|containerd[-/]|cri-containerd-|crio-|libpod-)([0-9a-f]{64})")


@dataclass
class ServerProcess:
    """A discovered API server. ``argv`` is raw (unredacted): redact before sending."""

    pid: int
    argv: list[str]
    serve_index: int  # index in argv of the first word after ``serve`` / the module name
    started_at: datetime | None = None
    env: dict[str, str] | None = None
    cwd: str | None = None
    exe: str | None = None
    port: int | None = None
    host: str | None = None
    uds: str | None = None
    listen_ports: set[int] | None = None
    container_id: str | None = None
    container_image: str | None = None
    kubernetes: dict | None = None  # {namespace, pod, container, pod_uid} (fleet_agent/kube.py)
    pod_ip: str | None = None  # where a wildcard-bound server in a pod network is reached
    base_url: str | None = None
    connect_url: str | None = None  # where the agent connects (--uds through proc/PID/root)
    creds: procfs.Creds | None = None  # whose rights files named in argv are read with
    errors: list[str] = field(default_factory=list)

    def options(self) -> list[str]:
        """The vLLM arguments (after ``serve`` / the module name)."""
        return self.argv[self.serve_index:]


def server_args_start(argv: list[str]) -> int | None:
    """Index of the first vLLM argument when ``argv`` launches an API server, else None."""
    if not argv or _TITLE.match(argv[0]) or "--multiprocessing-fork" in argv:
        return None
    first = PurePosixPath(argv[0]).name
    if first == "vllm":
        return 2 if argv[1:2] == ["serve"] else None
    if not _PYTHON.match(first):
        return None
    return _python_args_start(argv)


def _python_args_start(argv: list[str]) -> int | None:
    i = 1
    while i < len(argv):
        word = argv[i]
        if word == "-m" and i + 1 < len(argv):
            module = argv[i + 1]
            if module in _API_MODULES:
                return i + 2
            if module in _CLI_MODULES and argv[i + 2:i + 3] == ["serve"]:
                return i + 3
            return None
        if word == "-c":
            return None  # spawn stubs and resource trackers run code strings
        if not word.startswith("-"):
            # the script: <bin>/vllm serve (console script run by its interpreter)
            if PurePosixPath(word).name == "vllm" and argv[i + 1:i + 2] == ["serve"]:
                return i + 2
            return None
        i += 2 if word in ("-W", "-X") else 1
    return None


def option_value(args: list[str], *names: str) -> str | None:
    """Last value of ``--name value`` / ``--name=value`` (dash/underscore spellings alike)."""
    wanted = {n.replace("_", "-") for n in names}
    value: str | None = None
    for i, word in enumerate(args):
        flag, eq, rest = word.partition("=")
        if flag.replace("_", "-") not in wanted:
            continue
        if eq:
            value = rest
        elif i + 1 < len(args):
            value = args[i + 1]
    return value


def positional_model(args: list[str]) -> str | None:
    """``vllm serve MODEL``: the model tag when it is the first argument."""
    if args and not args[0].startswith("-"):
        return args[0]
    return None


def find_servers(table: procfs.ProcTable) -> list[ServerProcess]:
    """API servers in ``table``, sorted by pid; children of servers are skipped."""
    candidates: dict[int, int] = {}
    for pid, info in table.procs.items():
        start = server_args_start(info.argv)
        if start is not None and not _TITLE.match(info.comm or ""):
            candidates[pid] = start
    servers = []
    for pid in sorted(candidates):
        if any(parent in candidates for parent in table.ancestors(pid)):
            continue
        servers.append(ServerProcess(pid=pid, argv=table.procs[pid].argv,
                                     serve_index=candidates[pid],
                                     started_at=table.started_at(pid)))
    return servers


def inspect(table: procfs.ProcTable, server: ServerProcess) -> None:
    """Fill env, cwd, exe, container, port/host/uds and ``base_url`` of ``server`` in place."""
    pdir = table.proc_dir(server.pid)
    server.creds = procfs.read_creds(pdir)
    if server.creds is None:
        server.errors.append("status not readable: files named in argv are not read")
    server.env = procfs.read_environ(pdir)
    if server.env is None:
        server.errors.append("environ not readable (needs CAP_SYS_PTRACE or the same user)")
    server.cwd = procfs.read_link(pdir / "cwd")
    server.exe = procfs.read_link(pdir / "exe")
    _read_container(table.root, server)
    _read_pod(table.root, server)
    _read_endpoint(table, server)


def _read_pod(root: Path, server: ServerProcess) -> None:
    """Pod names from the cgroup path, the runtime's record and the env (kube.pod_info)."""
    server.kubernetes, image = kube.pod_info(root, server.pid, server.env)
    if server.kubernetes is None:
        return
    server.container_image = server.container_image or image
    # 127.0.0.1 in the agent's namespace is not the pod's loopback: connect to the pod's IP.
    server.pod_ip = kube.pod_ipv4(root, server.pid)


def _read_endpoint(table: procfs.ProcTable, server: ServerProcess) -> None:
    args = server.options()
    server.uds = option_value(args, "--uds")
    server.host = option_value(args, "--host")
    port_text = option_value(args, "--port")
    if port_text is None and option_value(args, "--config"):
        port_text = _yaml_scalar(table, server, "port")
        server.host = server.host or _yaml_scalar(table, server, "host")
    try:
        server.port = int(port_text) if port_text else DEFAULT_PORT
    except ValueError:
        # Never echo a value read from a file: only argv (already in the report) is quoted.
        shown = repr(port_text) if option_value(args, "--port") is not None else "in --config"
        server.errors.append(f"port {shown} is not a number; assuming {DEFAULT_PORT}")
        server.port = DEFAULT_PORT
    if not 0 <= server.port <= 65535:
        server.errors.append(f"port {server.port} is not a TCP port; assuming {DEFAULT_PORT}")
        server.port = DEFAULT_PORT
    if server.uds:
        server.base_url = f"unix:{server.uds}"
        host_paths = resolve_in_process(table.root, server, server.uds)
        # AF_UNIX paths are limited to 107 bytes; fall back to the path as the process sees it.
        usable = [p for p in host_paths if len(str(p)) < 108 and p.exists()]
        server.connect_url = f"unix:{usable[0] if usable else server.uds}"
        return
    server.listen_ports = procfs.listening_ports(table.proc_dir(server.pid))
    if server.listen_ports is not None and server.port not in server.listen_ports:
        server.errors.append(
            f"port {server.port} from argv is not listening (listening: "
            f"{sorted(server.listen_ports) or 'none'}; still loading, or port set elsewhere)")
    connect_host = _connect_host(server.host)
    if server.pod_ip and (not server.host or server.host in ("0.0.0.0", "::", "[::]")):  # noqa: S104
        connect_host = server.pod_ip  # a server bound to its pod's loopback stays unreachable
    server.base_url = f"http://{connect_host}:{_published_port(table, server)}"
    try:
        urlsplit(server.base_url).port  # noqa: B018 - the dashboard refuses what raises here
    except ValueError:
        server.errors.append("--host is not a host name urllib can parse; using 127.0.0.1")
        server.base_url = f"http://127.0.0.1:{_published_port(table, server)}"
    server.connect_url = server.base_url


def _connect_host(host: str | None) -> str:
    if not host or host in ("0.0.0.0", "::", "[::]"):  # noqa: S104 - wildcard binds
        return "127.0.0.1"
    if ":" in host and not host.startswith("["):
        return f"[{host}]"
    return host


def _yaml_scalar(table: procfs.ProcTable, server: ServerProcess, key: str) -> str | None:
    """``key: value`` from the ``--config`` YAML (top-level scalars only; no YAML library)."""
    path = option_value(server.options(), "--config") or ""
    data = read_in_process(table.root, server, path, limit=1 << 20)
    if data is None:
        return None
    for line in data.decode("utf-8", "replace").splitlines():
        match = re.match(rf"^{key}\s*:\s*['\"]?([^'\"#\s]+)", line)
        if match:
            return match.group(1)
    return None


def in_process_path(server: ServerProcess, path: str) -> str | None:
    """``path`` as an absolute in-namespace path (relative ones against the process's cwd),
    or None when it is relative and the cwd is unknown."""
    if path.startswith("/"):
        return path
    if server.cwd and server.cwd.startswith("/"):
        return f"{server.cwd.rstrip('/')}/{path}"
    return None


def resolve_in_process(root: Path, server: ServerProcess, path: str) -> list[Path]:
    """Candidate host paths for a path the process would open (relative to its cwd)."""
    pid_root = root / "proc" / str(server.pid)
    if path.startswith("/"):
        return [procfs.in_namespace(root, server.pid, path)]
    out = []
    if server.cwd and server.cwd.startswith("/"):
        out.append(procfs.in_namespace(root, server.pid, f"{server.cwd}/{path}"))
    out.append(pid_root / "cwd" / path)
    return out


def read_in_process(root: Path, server: ServerProcess, path: str,
                    limit: int = 8 << 20) -> bytes | None:
    """Read a file as the process would see it and with the process's rights only.

    ``path`` comes from the process's argv/env (another user controls it): the file is read
    only if the process's uid/groups could read it (:func:`procfs.read_as`), so the agent's
    CAP_DAC_READ_SEARCH never reads, hashes or parses a file on that user's behalf that the
    user could not. None when missing, unreadable for the process, or its rights unknown.
    """
    absolute = in_process_path(server, path)
    if absolute is None or server.creds is None:
        return None
    return procfs.read_as(root / "proc" / str(server.pid) / "root", absolute, server.creds,
                          limit)


def _read_container(root: Path, server: ServerProcess) -> None:
    cgroup = procfs.read_bytes(root / "proc" / str(server.pid) / "cgroup")
    if cgroup is None:
        return
    match = _CGROUP_ID.search(cgroup.decode("utf-8", "replace"))
    if not match:
        return
    server.container_id = match.group(1)
    config = _docker_config(root, server.container_id)
    if config:
        image = (config.get("Config") or {}).get("Image")
        server.container_image = image if isinstance(image, str) else None


def _docker_config(root: Path, container_id: str) -> dict | None:
    path = root / "var/lib/docker/containers" / container_id / "config.v2.json"
    data = procfs.read_bytes(path, limit=8 << 20)
    if data is None:
        return None
    try:
        parsed = json.loads(data)
    except (ValueError, RecursionError):
        return None
    return parsed if isinstance(parsed, dict) else None


def _published_port(table: procfs.ProcTable, server: ServerProcess) -> int:
    """The host port Docker publishes for the container port, else the port itself."""
    port = server.port or DEFAULT_PORT
    if not server.container_id:
        return port
    config = _docker_config(table.root, server.container_id) or {}
    bindings = ((config.get("NetworkSettings") or {}).get("Ports") or {}).get(f"{port}/tcp")
    for binding in bindings or []:
        host_port = (binding or {}).get("HostPort")
        if host_port and str(host_port).isdigit():
            return int(host_port)
    return port
