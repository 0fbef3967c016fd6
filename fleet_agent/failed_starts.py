"""Failed starts: vLLM servers that exit during start-up and are restarted again and again.

Three sources, each optional and never fatal (what cannot be read becomes an ``errors`` note):

* **systemd**: ``systemctl list-units --type=service --all`` then ``systemctl show`` of every
  unit whose ``ExecStart`` launches a vLLM API server (:func:`discovery.server_args_start`);
  a unit counts as a failed start when it is not ``active/running`` and it is ``failed``,
  waiting to restart (``auto-restart``) or its last run did not end in ``Result=success``.
  Its error lines come from ``journalctl -u UNIT -o json -n N --no-pager``.
* **Docker / Podman**: the Engine API over the unix socket (``/var/run/docker.sock``, Podman's
  Docker-compatible ``/run/podman/podman.sock``) with httpx's UDS transport:
  ``GET /containers/json?all=1``, ``GET /containers/{id}/json`` (``RestartCount``,
  ``State.ExitCode``, ``State.FinishedAt``) and ``GET /containers/{id}/logs?tail=N``.
  A container counts when its image or command names vLLM and it is ``restarting``, was
  OOM-killed, or exited with a code other than a stop's (0, 130, 137, 143).
* **process**: a vLLM API server seen running (by a cycle, or by the agent loop's cheap
  :meth:`ProcessMemory.watch` every :data:`WATCH_S` seconds between cycles, so a start that
  dies within 10 s is seen) whose process is gone and whose slot (same argv) has no running
  server. Its lines are read back from where its stdout/stderr went
  (:mod:`fleet_agent.process_logs`: a log file, the journal). A clean stop (it served, and no
  traceback or exception in its last lines: exit 0, SIGTERM) is not a failed start; one that
  exited before its port ever answered, or with a traceback, is.

Every entry carries the installed vLLM version when known (``vllm_version``): the process's
site-packages (any dist providing the ``vllm`` package), the unit's ExecStart interpreter,
or the container image's version label / tag.

Bounds (per entry): the last :data:`MAX_LINES` error lines of at most :data:`MAX_LINE_CHARS`
characters each, :data:`MAX_ENTRY_LINE_BYTES` bytes of lines in all; at most
:data:`MAX_FAILED_STARTS` entries per report. Only lines that look like errors are kept
(:data:`ERROR_LINE`), never noise (:data:`NOISE_LINE`: argparse's usage text, log lines
at INFO/WARNING/DEBUG level such as the ulimit warning that quotes ``OSError:``, Python
warnings), and lines that look like request logging (:data:`REQUEST_LINE`: request
ids, prompts, sampled outputs) are always dropped, so prompts never leave the node. Argv and
lines pass the agent's redaction (:mod:`fleet_agent.redact`); the collector then scrubs every
secret value seen anywhere in the report from them too.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import struct
import subprocess
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx

from fleet_agent import capabilities, discovery, ondisk, process_logs, procfs, redact

log = logging.getLogger("fleet_agent.failed_starts")

#: Entries per report; a node with more crash-looping vLLM units has a bigger problem.
MAX_FAILED_STARTS = 16
#: Error lines kept per entry (the last ones: the cause is at the end of a traceback).
MAX_LINES = 40
#: Characters kept per line (vLLM prefixes every worker line with ~60 characters of context).
MAX_LINE_CHARS = 500
#: Bytes of lines per entry after truncation (UTF-8).
MAX_ENTRY_LINE_BYTES = 16 * 1024
#: Journal / container log lines read per unit (the newest).
TAIL_LINES = 400
#: Seconds allowed for one systemctl/journalctl call or one Docker API request.
COMMAND_TIMEOUT_S = 5.0
#: Largest log body read from the Docker API, in bytes.
MAX_LOG_BYTES = 1 << 20

#: A line worth keeping: Python tracebacks and exceptions, vLLM's ERROR level, argparse usage
#: errors, pydantic validation errors, CUDA/NCCL failures and OOMs.
ERROR_LINE = re.compile(
    r"Traceback \(most recent call last\)|\bERROR\b|\bCRITICAL\b|\bFATAL\b|"
    r"\w*(?:Error|Exception)\b:?|\berror:|Value error|"
    r"\bCUDA\b|\bNCCL\b|\bcuda(?:Malloc|Error)|OutOfMemory|out of memory|"
    r"Segmentation fault|core dumped|Killed|No such file")
#: A line that looks like request logging; dropped even when it also looks like an error,
#: because it may carry a prompt or generated text.
REQUEST_LINE = re.compile(
    r"Received request|\bprompt\s*[:=]|prompt_token_ids|\bmessages\s*[:=]|"
    r"Generated (?:response|text)|sampling_params|\boutput\s*[:=]|"
    r"\"(?:GET|POST|PUT|DELETE) /|\b(?:GET|POST) /v1/|chatcmpl-|cmpl-[0-9a-f]|"
    r"Added request|Finished request|Aborted request", re.IGNORECASE)
#: Lines that look like errors but are not the failure: argparse's usage text (``usage:``
#: and its indented ``[--option …]`` continuation lines, which list ``ERROR`` as a log level),
#: vLLM log lines below ERROR level (the ulimit WARNING quotes ``OSError: [Errno 24]``), and
#: Python warnings (``DeprecationWarning: …``, the ``warnings.warn(`` line under it).
NOISE_LINE = re.compile(
    r"^usage: |^\s+\[-|^\s+[-\w]*\s*\[--|"
    r"\b(?:INFO|WARNING|DEBUG)\s+\d\d-\d\d\s+\d\d:\d\d|"
    r"\b\w*Warning: |^\s*warnings\.warn\(")
#: Seconds between the agent loop's checks of the servers it tracks (a few: cheap).
WATCH_S = 3.0
#: Container exit codes of a stop, not a failure: 0, and SIGINT/SIGKILL/SIGTERM as 128+N
#: (``docker stop`` sends SIGTERM, then SIGKILL after its timeout).
_STOPPED_EXIT_CODES = (0, 130, 137, 143, None)
#: What systemctl prints where it is installed but systemd is not PID 1 (a container, WSL):
#: no systemd on this node, as when systemctl is missing (systemd's
#: src/shared/bus-util.c, "System has not been booted with systemd as init system").
NO_SYSTEMD = "has not been booted with systemd"
#: Words in an image reference or command that mark a vLLM container.
_VLLM_WORD = re.compile(r"vllm", re.IGNORECASE)


@dataclass
class Sources:
    """Where failed starts are read from; every path is injectable for tests.

    ``systemctl``/``journalctl`` are executables (looked up in ``path`` when given, else in the
    agent's PATH); sockets that do not exist are skipped silently (no Docker on this node).
    """

    systemctl: str = "systemctl"
    journalctl: str = "journalctl"
    docker_sockets: tuple[tuple[str, str], ...] = (
        ("docker", "/var/run/docker.sock"), ("podman", "/run/podman/podman.sock"))
    path: str | None = None
    systemd: bool = True
    #: Where the host's files are (ExecStart's interpreter is looked up under it).
    root: Path = Path("/")


@dataclass
class ProcessMemory:
    """vLLM servers seen running, ``{pid: Tracked}`` (raw argv, never sent), kept by the
    agent loop across cycles; ``known`` is every pid of the last watch (only new pids have
    their cmdline read)."""

    servers: dict[int, process_logs.Tracked] = field(default_factory=dict)
    known: set[int] = field(default_factory=set)
    recheck: dict[int, int] = field(default_factory=dict)

    def _open_logs(self) -> int:
        return sum(len(t.handles) for t in self.servers.values())

    def track(self, root: Path, pid: int, argv: list[str]) -> process_logs.Tracked:
        """Remember a running server (once; a known pid keeps its record)."""
        if pid not in self.servers:
            self.servers[pid] = process_logs.track(root, pid, argv, self._open_logs())
        return self.servers[pid]

    def note(self, pid: int, version: str | None, served: bool) -> None:
        """What a cycle learnt of a tracked server: its installed version, whether it answered."""
        item = self.servers.get(pid)
        if item is not None:
            item.version = version or item.version
            item.served = item.served or served

    def watch(self, root: Path, journalctl: str | None = "journalctl") -> int:
        """Between cycles: read back every tracked server that is gone (while its log file is
        still held open), and track vLLM servers started since the last look (a new pid whose
        cmdline launches one, not the child of a tracked server). Returns how many exited."""
        proc = root / "proc"
        try:
            pids = {int(p) for p in os.listdir(proc) if p.isdigit()}
        except OSError:
            return 0
        exited = 0
        for pid, item in self.servers.items():
            if item.exited_at is None and (pid not in pids or _zombie(proc / str(pid))):
                process_logs.read_back(item, journalctl)
                exited += 1
        # a pid is read again at the next two looks: one caught between fork and exec
        # shows its parent's cmdline first
        fresh = (pids - self.known) | {p for p in self.recheck if p in pids}
        self.recheck = {p: n - 1 for p, n in self.recheck.items() if n > 1 and p in pids}
        for pid in sorted(fresh):
            if pid not in self.known:
                self.recheck[pid] = 2
            if pid in self.servers:
                continue
            argv = _cmdline(proc / str(pid))
            if argv and discovery.server_args_start(argv) is not None \
                    and _parent(proc / str(pid)) not in self.servers:
                item = self.track(root, pid, argv)
                item.version = item.version or ondisk.installed_vllm_version(
                    root, discovery.ServerProcess(
                        pid=pid, argv=argv, serve_index=discovery.server_args_start(argv) or 0,
                        exe=procfs.read_link(proc / str(pid) / "exe"),
                        env=procfs.read_environ(proc / str(pid)),
                        creds=procfs.read_creds(proc / str(pid))))
        self.known = pids
        return exited

    def vanished(self, root: Path, current: list[discovery.ServerProcess],
                 journalctl: str | None = "journalctl") -> list[process_logs.Tracked]:
        """Servers that are gone and not running again under the same argv, read back, that
        crashed (:func:`crashed`); tracks ``current`` from now on."""
        running = {tuple(s.argv) for s in current}
        now = {s.pid for s in current}
        gone = []
        for pid, item in list(self.servers.items()):
            if pid in now:
                continue
            del self.servers[pid]
            if item.exited_at is None:
                process_logs.read_back(item, journalctl)
            if tuple(item.argv) not in running and crashed(item):
                gone.append(item)
            item.close()
        for server in current:
            self.track(root, server.pid, server.argv)
        return gone


def _cmdline(pdir: Path) -> list[str]:
    data = procfs.read_bytes(pdir / "cmdline", limit=1 << 20)
    return [a.decode("utf-8", "replace") for a in (data or b"").split(b"\0") if a]


def _zombie(pdir: Path) -> bool:
    """True when the process has exited and waits for its parent to reap it (state Z)."""
    data = procfs.read_bytes(pdir / "stat", limit=4096) or b""
    fields = data.rsplit(b")", 1)[-1].split()
    return bool(fields) and fields[0] in (b"Z", b"X")


def _parent(pdir: Path) -> int | None:
    data = procfs.read_bytes(pdir / "stat", limit=4096) or b""
    fields = data.rsplit(b")", 1)[-1].split()
    return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None


#: A line that shows the process died of an error, not of a stop.
_FAILURE = re.compile(r"Traceback \(most recent call last\)|^\S*(?:Error|Exception)\b|"
                      r"\w(?:Error|Exception): |: error: |Segmentation fault|core dumped")


def crashed(item: process_logs.Tracked) -> bool:
    """A start-up crash: it exited before its port ever answered, or its last lines hold a
    traceback or an exception. A server that served and stopped without one (exit 0,
    SIGTERM from its operator) stopped cleanly."""
    return not item.served or any(_FAILURE.search(line) for line in item.lines[-200:]
                                  if not NOISE_LINE.search(line))


# ----------------------------------------------------------------------------- lines


#: A line of a PEM body (RFC 7468: base64 lines, or a ``Name: value`` header of legacy PEM)
#: possibly after a journal prefix; anything else ends a key whose END line never came.
_KEY_BODY = re.compile(r"(?:^|\s)(?:[A-Za-z0-9+/=]{16,}|[A-Za-z-]+: [^\s]+)\s*$")


def clean_lines(raw: list[str], found: set[str] | None = None) -> list[str]:
    """Keep the last :data:`MAX_LINES` error lines of ``raw``, never request logging,
    each truncated to :data:`MAX_LINE_CHARS` and redacted, :data:`MAX_ENTRY_LINE_BYTES` in all.
    """
    kept: list[str] = []
    in_key = False  # between a "-----BEGIN … PRIVATE KEY-----" line and its END line
    for line in raw:
        line = line.rstrip("\r\n").replace("\x00", "")
        starts = "PRIVATE KEY-----" in line and "-----BEGIN" in line
        ends = "PRIVATE KEY-----" in line and "-----END" in line
        if in_key and not ends and not _KEY_BODY.search(line):
            in_key = False  # the key was cut short: this line is the log again
        if in_key or (starts and not ends):
            in_key = not ends  # a key logged one line at a time: no body line is kept
            continue
        if not line.strip() or REQUEST_LINE.search(line) or not ERROR_LINE.search(line) \
                or NOISE_LINE.search(line):
            continue
        kept.append(redact_line(line[:MAX_LINE_CHARS], found))
    kept = kept[-MAX_LINES:]
    total, out = 0, []
    for line in reversed(kept):
        total += len(line.encode("utf-8")) + 1
        if total > MAX_ENTRY_LINE_BYTES:
            break
        out.append(line)
    return list(reversed(out))


def redact_line(line: str, found: set[str] | None = None) -> str:
    """A log line through the agent's redaction (:func:`fleet_agent.redact.redact_line`)."""
    return redact.redact_line(line, found)


def _entry(source: str, name: str, argv: list[str], found: set[str], **fields: Any
           ) -> dict[str, Any]:
    lines = fields.pop("lines", [])
    return {"source": source, "unit_or_container": name[:255],
            "argv": redact.redact_argv(argv, found)[:512],
            "lines": clean_lines(lines, found), "errors": fields.pop("errors", []), **fields}


# ----------------------------------------------------------------------------- systemd


def _run(argv: list[str], src: Sources) -> str:
    """Run ``argv`` (systemctl/journalctl) without the agent's ambient capabilities: with
    CAP_DAC_READ_SEARCH, journalctl would read every journal whatever its group."""
    capabilities.clear_ambient()  # this thread's set: the child is forked from it
    env = {"PATH": src.path, "LC_ALL": "C"} if src.path else None
    done = subprocess.run(argv, capture_output=True, timeout=COMMAND_TIMEOUT_S, check=False,  # noqa: S603 - fixed argv, no shell
                          env=env, text=True, errors="replace")
    if done.returncode != 0:
        raise RuntimeError(f"{argv[0]} exited {done.returncode}: {done.stderr.strip()[:200]}")
    return done.stdout


def parse_show(text: str) -> list[dict[str, str]]:
    """``systemctl show U1 U2 -p ...`` output: one ``{property: value}`` per unit block."""
    units, current = [], {}
    for line in text.splitlines():
        if not line.strip():
            if current:
                units.append(current)
            current = {}
            continue
        key, _, value = line.partition("=")
        current[key] = value
    if current:
        units.append(current)
    return units


def exec_start_argv(value: str) -> list[str]:
    """``ExecStart={ path=/usr/bin/vllm ; argv[]=/usr/bin/vllm serve m --port 8000 ; ... }``
    -> the argv list (first ExecStart only)."""
    match = re.search(r"argv\[\]=(.*?) ;", value)
    text = match.group(1) if match else value.strip("{} ")
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


def _vllm_argv(argv: list[str]) -> bool:
    if discovery.server_args_start(argv) is not None:
        return True
    # wrappers: `/usr/bin/env VAR=x vllm serve ...`, `bash -c "vllm serve ..."`
    return any(discovery.server_args_start(argv[i:]) is not None for i in range(1, len(argv)))


def _usec_time(value: str) -> str | None:
    if not value or value in ("0", "n/a"):
        return None
    try:
        return datetime.fromtimestamp(int(value) / 1e6, timezone.utc).isoformat()
    except (ValueError, OverflowError):
        return None


_SHOW_PROPS = ("Id,ExecStart,ActiveState,SubState,Result,NRestarts,ExecMainStatus,"
               "ExecMainExitTimestamp")


def systemd_failed(src: Sources, found: set[str]) -> list[dict[str, Any]]:
    """Failed-start entries of vLLM units (see module docstring); raises on a systemctl error."""
    listing = _run([src.systemctl, "list-units", "--type=service", "--all", "--no-legend",
                    "--plain", "--no-pager"], src)
    names = [line.split()[0] for line in listing.splitlines() if line.split()]
    names = [n for n in names if n.endswith(".service")][:512]
    if not names:
        return []
    shown = _run([src.systemctl, "show", "--no-pager", f"--property={_SHOW_PROPS}",
                  "--timestamp=unix", *names], src)
    out = []
    for unit in parse_show(shown):
        argv = exec_start_argv(unit.get("ExecStart", ""))
        if not argv or not _vllm_argv(argv) or not _unit_failed(unit):
            continue
        out.append(_systemd_entry(unit, argv, src, found))
    return out


def _unit_failed(unit: dict[str, str]) -> bool:
    """Not running, and the last run ended badly: ``failed``, waiting to restart
    (``auto-restart``), or a ``Result`` other than ``success`` (``exit-code``, ``signal``,
    ``core-dump``, ``oom-kill``, ``start-limit-hit``...). A unit the operator stopped ends
    with ``Result=success`` whatever its exit status (SIGTERM), so it is not reported."""
    if unit.get("ActiveState") == "active" and unit.get("SubState") == "running":
        return False
    if unit.get("ActiveState") == "failed" or unit.get("SubState") == "auto-restart":
        return True
    return unit.get("Result", "success") not in ("", "success")


def _int(value: Any) -> int:
    try:
        return max(0, int(value))
    except (TypeError, ValueError):
        return 0


def _systemd_entry(unit: dict[str, str], argv: list[str], src: Sources,
                   found: set[str]) -> dict[str, Any]:
    name = unit.get("Id", "?")
    errors, lines = [], []
    try:
        lines = journal_lines(name, src)
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        errors.append(f"journal of {name} not readable: {exc}"[:300])
    exit_at = unit.get("ExecMainExitTimestamp", "").lstrip("@")
    return _entry("systemd", name, argv, found, lines=lines, errors=errors,
                  restart_count=_int(unit.get("NRestarts")),
                  exit_code=_int(unit.get("ExecMainStatus")) if unit.get("ExecMainStatus")
                  else None,
                  last_exit_at=_usec_time(exit_at + "000000") if exit_at.isdigit() else None,
                  state=f"{unit.get('ActiveState', '?')}/{unit.get('SubState', '?')}"[:64],
                  image=None, vllm_version=ondisk.version_for_argv(src.root, argv))


def journal_lines(unit: str, src: Sources) -> list[str]:
    """``MESSAGE`` of the unit's last :data:`TAIL_LINES` journal entries, oldest first."""
    text = _run([src.journalctl, "-u", unit, "-o", "json", "-n", str(TAIL_LINES),
                 "--no-pager"], src)
    lines = []
    for row in text.splitlines():
        try:
            message = json.loads(row).get("MESSAGE")
        except (ValueError, AttributeError, RecursionError):
            continue
        if isinstance(message, list):  # journald sends non-UTF-8 messages as byte arrays
            message = bytes(b & 0xFF for b in message if isinstance(b, int)).decode(
                "utf-8", "replace")
        if isinstance(message, str):
            lines.extend(message.splitlines())
    return lines


# ----------------------------------------------------------------------------- containers


def container_failed(source: str, socket_path: str, found: set[str]) -> list[dict[str, Any]]:
    """Failed-start entries of vLLM containers behind one Engine API socket."""
    transport = httpx.HTTPTransport(uds=socket_path)
    with httpx.Client(transport=transport, base_url="http://engine",
                      timeout=COMMAND_TIMEOUT_S) as client:
        listing = client.get("/containers/json", params={"all": "1"})
        listing.raise_for_status()
        out = []
        for row in listing.json() or []:
            if not isinstance(row, dict) or not _VLLM_WORD.search(
                    f"{row.get('Image', '')} {row.get('Command', '')}"):
                continue
            entry = _container_entry(client, source, str(row.get("Id", "")), found)
            if entry is not None:
                out.append(entry)
        return out


def _container_entry(client: httpx.Client, source: str, cid: str,
                     found: set[str]) -> dict[str, Any] | None:
    info = client.get(f"/containers/{cid}/json").json()
    state = info.get("State") or {}
    config = info.get("Config") or {}
    restarts, exit_code = _int(info.get("RestartCount")), state.get("ExitCode")
    status = str(state.get("Status", ""))
    if status == "running" or not (status == "restarting" or state.get("OOMKilled")
                                   or exit_code not in _STOPPED_EXIT_CODES):
        return None
    argv = [str(w) for w in (config.get("Entrypoint") or []) + (config.get("Cmd") or [])]
    errors, lines = [], []
    try:
        lines = container_log_lines(client, cid, bool(config.get("Tty")))
    except (httpx.HTTPError, ValueError) as exc:
        errors.append(f"logs of {cid[:12]} not readable: {exc}"[:300])
    finished = state.get("FinishedAt")
    return _entry(source, str(info.get("Name", cid)).lstrip("/") or cid[:12], argv or ["?"],
                  found, lines=lines, errors=errors, restart_count=restarts,
                  exit_code=exit_code if isinstance(exit_code, int) else None,
                  last_exit_at=finished if finished and not finished.startswith("0001") else None,
                  state=status[:64] or None, image=str(config.get("Image") or "")[:500] or None,
                  vllm_version=ondisk.image_vllm_version(config.get("Image"),
                                                         config.get("Labels")))


def container_log_lines(client: httpx.Client, cid: str, tty: bool) -> list[str]:
    """The container's last :data:`TAIL_LINES` log lines (stdout and stderr)."""
    body = b""
    with client.stream("GET", f"/containers/{cid}/logs",
                       params={"stdout": "1", "stderr": "1", "tail": str(TAIL_LINES)}) as resp:
        resp.raise_for_status()
        for chunk in resp.iter_bytes():
            body += chunk
            if len(body) >= MAX_LOG_BYTES:
                break
    text = body.decode("utf-8", "replace") if tty else demultiplex(body)
    return text.splitlines()


def demultiplex(body: bytes) -> str:
    """Docker's multiplexed log stream (non-TTY containers): frames of an 8-byte header
    ``[stream, 0, 0, 0, size (uint32 big-endian)]`` then ``size`` bytes. A body that is not
    framed (Podman with a TTY, an old daemon) is returned as text."""
    out, i = [], 0
    while i + 8 <= len(body):
        kind, size = body[i], struct.unpack(">I", body[i + 4:i + 8])[0]
        if kind not in (0, 1, 2) or body[i + 1:i + 4] != b"\0\0\0":
            return body.decode("utf-8", "replace")
        out.append(body[i + 8:i + 8 + size])
        i += 8 + size
    return b"".join(out).decode("utf-8", "replace")


# ----------------------------------------------------------------------------- cycle


def collect_failed_starts(src: Sources | None, memory: ProcessMemory | None,
                          current: list[discovery.ServerProcess], found: set[str],
                          root: Path = Path("/")) -> tuple[list[dict[str, Any]], list[str]]:
    """All failed-start entries of this node and the notes of sources that failed
    (``root``: where ``proc/`` is, for the process source)."""
    entries: list[dict[str, Any]] = []
    notes: list[str] = []
    if src is not None and src.systemd:
        try:
            entries += systemd_failed(src, found)
        except FileNotFoundError:
            pass  # no systemd on this node (a container, a minimal image)
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            if NO_SYSTEMD not in str(exc):  # systemctl installed, systemd not running
                notes.append(f"systemd: {exc}"[:300])
    for source, path in src.docker_sockets if src is not None else ():
        try:
            entries += container_failed(source, path, found)
        except httpx.ConnectError as exc:
            if os.path.exists(path):  # a daemon we may not talk to (docker group missing)
                notes.append(f"{source}: cannot connect to {path}: {exc}"[:300])
        except (httpx.HTTPError, ValueError, OSError) as exc:
            notes.append(f"{source}: {exc}"[:300])
    if memory is not None:
        for item in memory.vanished(root, current,
                                    src.journalctl if src is not None else None):
            entries.append(_entry("process", "process", item.argv, found,
                                  restart_count=None, exit_code=None,
                                  last_exit_at=(item.exited_at or datetime.now(
                                      timezone.utc)).isoformat(),
                                  state="exited", image=None, lines=item.lines,
                                  errors=item.errors[:20], vllm_version=item.version))
    return entries[:MAX_FAILED_STARTS], notes
