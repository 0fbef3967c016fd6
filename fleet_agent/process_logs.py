"""Where a plain-process vLLM server logs, and what it said when it exited.

A server run as a process (no systemd unit, no container) leaves no record once it is gone,
so the agent remembers, while it runs, where its stdout (``/proc/PID/fd/1``) and stderr
(``fd/2``) go:

* a **regular file** (``vllm serve … > /var/log/vllm.log 2>&1``): the agent opens the file
  through ``/proc/PID/fd/N`` (read-only; it works whatever the process's mount namespace and
  survives rotation or deletion) and keeps the descriptor, then reads the file's tail after the
  process exits;
* a **pipe or socket to journald** (``systemd-run``, ``systemd-cat``, a unit's child): the
  journal's lines of that PID (``journalctl _PID=PID``);
* anything else (a terminal, a pipe to another program): nothing can be read back; the entry
  then says so in ``errors``.

:class:`Tracked` is one remembered server; :func:`track` fills it, :func:`tail_lines` reads
it back. Never raises on an unreadable ``/proc`` entry (the server may be gone already).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from fleet_agent import capabilities, procfs

#: Bytes read from the end of a log file (the cause is in the last lines of a traceback;
#: 256 KiB holds vLLM's argparse usage text (about 40 KiB) and a long traceback).
TAIL_BYTES = 256 * 1024
#: Log files kept open at once (each is one descriptor of the agent).
MAX_OPEN_LOGS = 64
#: Seconds allowed for one journalctl call.
JOURNAL_TIMEOUT_S = 5.0


@dataclass
class Tracked:
    """A vLLM server seen running: raw ``argv`` (never sent unredacted), where fd 1 and 2
    point (``stdout``/``stderr``: ``readlink`` text such as ``/var/log/v.log``,
    ``pipe:[123]``, ``socket:[456]``), the descriptors the agent holds on log files,
    ``version`` (installed vLLM, when read), ``served`` (its port answered once), and once it
    is gone: ``exited_at`` and the ``lines`` read back."""

    pid: int
    argv: list[str]
    stdout: str | None = None
    stderr: str | None = None
    handles: list[int] = field(default_factory=list)
    version: str | None = None
    served: bool = False
    exited_at: datetime | None = None
    lines: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    #: The process's filesystem credentials and the node root its paths resolve under: a log
    #: is read back only as the process itself could read it (never with the agent's rights).
    creds: procfs.Creds | None = None
    root: Path | None = None

    def close(self) -> None:
        for handle in self.handles:
            with contextlib.suppress(OSError):
                os.close(handle)
        self.handles = []


def _is_file_target(target: str | None) -> bool:
    return bool(target) and target.startswith("/") and not target.startswith(("/dev/",
                                                                             "/proc/"))


def track(root: Path, pid: int, argv: list[str], open_logs: int) -> Tracked:
    """A :class:`Tracked` for a running server; opens its log file(s) while fewer than
    :data:`MAX_OPEN_LOGS` are open (``open_logs``)."""
    item = Tracked(pid=pid, argv=list(argv), root=root,
                   creds=procfs.read_creds(root / "proc" / str(pid)))
    fd_dir = root / "proc" / str(pid) / "fd"
    seen: set[tuple[int, int]] = set()
    for number, attr in ((1, "stdout"), (2, "stderr")):
        try:
            target = os.readlink(fd_dir / str(number))
        except OSError:
            continue
        setattr(item, attr, target[:500])
        if not _is_file_target(target) or open_logs + len(item.handles) >= MAX_OPEN_LOGS:
            continue
        try:
            handle = os.open(fd_dir / str(number), os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            continue
        stat = os.fstat(handle)
        # Held open only when the process owns the file: opening through /proc/PID/fd is
        # checked with the agent's rights (CAP_DAC_READ_SEARCH in the DaemonSet), and a file
        # the process merely inherited may hold what its user could never read.
        if (stat.st_dev, stat.st_ino) in seen or item.creds is None \
                or stat.st_uid != item.creds.uid:
            os.close(handle)
            continue
        seen.add((stat.st_dev, stat.st_ino))
        item.handles.append(handle)
    return item


def read_tail(handle: int, limit: int = TAIL_BYTES) -> list[str]:
    """The last ``limit`` bytes of an open regular file, as lines (the first, partial, one
    dropped when the read starts mid-file)."""
    size = os.fstat(handle).st_size
    start = max(0, size - limit)
    data = os.pread(handle, size - start, start)
    lines = data.decode("utf-8", "replace").splitlines()
    return lines[1:] if start > 0 and lines else lines


def journal_by_pid(pid: int, journalctl: str = "journalctl", path: str | None = None
                   ) -> list[str]:
    """``MESSAGE`` of the journal's last 400 entries of ``_PID=pid``, oldest first. Raises
    OSError / subprocess errors when journalctl cannot run. The child gets no ambient
    capabilities: with CAP_DAC_READ_SEARCH it would read every journal whatever its group."""
    capabilities.clear_ambient()  # this thread's set: the child is forked from it
    env = {"PATH": path, "LC_ALL": "C"} if path else None
    done = subprocess.run([journalctl, f"_PID={pid}", "-o", "json", "-n", "400",  # noqa: S603
                           "--no-pager"], capture_output=True, timeout=JOURNAL_TIMEOUT_S,
                          check=False, env=env, text=True, errors="replace")
    lines: list[str] = []
    for row in done.stdout.splitlines():
        try:
            message: Any = json.loads(row).get("MESSAGE")
        except (ValueError, AttributeError, RecursionError):
            continue
        if isinstance(message, str):
            lines.extend(message.splitlines())
    return lines


def read_back(item: Tracked, journalctl: str | None = "journalctl",
              path: str | None = None) -> None:
    """Fill ``item.lines`` (and ``errors``) from where its output went; closes its files."""
    lines: list[str] = []
    for handle in item.handles:
        try:
            lines += read_tail(handle)
        except OSError as exc:
            item.errors.append(f"log file not readable: {exc}"[:300])
    item.close()
    targets = {t for t in (item.stdout, item.stderr) if t}
    if not lines and item.creds is not None and item.root is not None:
        for target in dict.fromkeys(t for t in (item.stderr, item.stdout)
                                    if _is_file_target(t) and not t.endswith(" (deleted)")):
            data = procfs.read_as(item.root, target, item.creds, TAIL_BYTES, tail=True)
            if data:
                lines = data.decode("utf-8", "replace").splitlines()
                lines = lines[1:] if len(data) >= TAIL_BYTES else lines  # a partial first line
                break
    if not lines and journalctl and any(t.startswith(("socket:", "pipe:")) for t in targets):
        try:
            lines = journal_by_pid(item.pid, journalctl, path)
        except (OSError, subprocess.SubprocessError) as exc:
            item.errors.append(f"journal of pid {item.pid} not readable: {exc}"[:300])
    if not lines and not item.errors:
        where = ", ".join(sorted(targets)) or "unknown"
        item.errors.append(f"output of pid {item.pid} went to {where}: not readable back"
                           [:300])
    item.lines = lines
    item.exited_at = item.exited_at or datetime.now(timezone.utc)
