"""Reading processes from a ``/proc`` tree under a filesystem root.

Everything goes through ``root`` (``/`` on a node, a fake tree in tests), so the
agent never touches the real ``/proc`` when told otherwise. Facts used:
``docs/vllm-facts.md`` section 3 (launch forms, setproctitle children,
listening sockets) and proc(5) (``stat`` field 22 = start time in clock ticks since
boot, ``/proc/stat`` ``btime``).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

#: Clock ticks per second when ``os.sysconf`` cannot tell (Linux USER_HZ is 100 everywhere).
DEFAULT_CLK_TCK = 100

#: ``/proc/net/tcp`` socket state for LISTEN (include/net/tcp_states.h: TCP_LISTEN = 10).
TCP_LISTEN = "0A"


@dataclass
class ProcInfo:
    """One process: ``argv`` from ``cmdline``, ``ppid``/``start_ticks`` from ``stat``."""

    pid: int
    ppid: int
    argv: list[str]
    comm: str = ""
    start_ticks: int | None = None


@dataclass
class ProcTable:
    """All readable processes under ``root/proc`` plus the boot time (Unix seconds)."""

    root: Path
    procs: dict[int, ProcInfo] = field(default_factory=dict)
    btime: int | None = None

    def proc_dir(self, pid: int) -> Path:
        """``<root>/proc/<pid>``."""
        return self.root / "proc" / str(pid)

    def ancestors(self, pid: int) -> list[int]:
        """Parent pids of ``pid``, nearest first, stopping at pid 0/1 or an unknown pid."""
        chain: list[int] = []
        seen = {pid}
        current = self.procs.get(pid)
        while current and current.ppid > 1 and current.ppid not in seen:
            chain.append(current.ppid)
            seen.add(current.ppid)
            current = self.procs.get(current.ppid)
        return chain

    def started_at(self, pid: int) -> datetime | None:
        """Process start time (UTC) from ``btime`` + ``start_ticks / SC_CLK_TCK``, or None."""
        info = self.procs.get(pid)
        if info is None or info.start_ticks is None or self.btime is None:
            return None
        seconds = self.btime + info.start_ticks / clock_ticks()
        return datetime.fromtimestamp(seconds, tz=timezone.utc)


def clock_ticks() -> int:
    """``SC_CLK_TCK`` (ticks per second), :data:`DEFAULT_CLK_TCK` when unavailable."""
    try:
        value = os.sysconf("SC_CLK_TCK")
    except (ValueError, OSError, AttributeError):
        return DEFAULT_CLK_TCK
    return value if value > 0 else DEFAULT_CLK_TCK


def read_bytes(path: Path, limit: int = 1 << 20) -> bytes | None:
    """Read at most ``limit`` bytes, None when missing or unreadable (process gone, EPERM)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(limit)
    except OSError:
        return None


def parse_stat(text: str) -> tuple[int, int] | None:
    """Return ``(ppid, starttime_ticks)`` from a ``/proc/PID/stat`` line, None if malformed.

    ``comm`` (field 2) may hold spaces and parentheses, so fields are counted after
    the last ``)``: field 3 (state) is index 0, field 4 (ppid) index 1, field 22 index 19.
    """
    tail = text.rsplit(")", 1)
    if len(tail) != 2:
        return None
    fields = tail[1].split()
    try:
        return int(fields[1]), int(fields[19])
    except (IndexError, ValueError):
        return None


def read_btime(root: Path) -> int | None:
    """Boot time (Unix seconds) from ``<root>/proc/stat``, None when unreadable."""
    data = read_bytes(root / "proc" / "stat")
    if data is None:
        return None
    for line in data.decode("ascii", "replace").splitlines():
        if line.startswith("btime "):
            try:
                return int(line.split()[1])
            except (IndexError, ValueError):
                return None
    return None


def read_process(root: Path, pid: int) -> ProcInfo | None:
    """Read one process's cmdline/stat/comm; None when it vanished or is unreadable."""
    base = root / "proc" / str(pid)
    cmdline = read_bytes(base / "cmdline")
    stat = read_bytes(base / "stat")
    if cmdline is None or stat is None:
        return None
    parsed = parse_stat(stat.decode("utf-8", "replace"))
    if parsed is None:
        return None
    # setproctitle pads the argv area with NULs: drop the empty trailing words.
    argv = [w.decode("utf-8", "replace") for w in cmdline.split(b"\0")]
    while argv and argv[-1] == "":
        argv.pop()
    comm = (read_bytes(base / "comm") or b"").decode("utf-8", "replace").strip()
    return ProcInfo(pid=pid, ppid=parsed[0], argv=argv, comm=comm, start_ticks=parsed[1])


def scan(root: Path) -> ProcTable:
    """Read every numeric entry of ``<root>/proc`` into a :class:`ProcTable`."""
    table = ProcTable(root=root, btime=read_btime(root))
    try:
        entries = os.listdir(root / "proc")
    except OSError:
        return table
    for name in entries:
        if name.isdigit():
            info = read_process(root, int(name))
            if info is not None:
                table.procs[info.pid] = info
    return table


def read_environ(proc_dir: Path) -> dict[str, str] | None:
    """``/proc/PID/environ`` as a dict; None when unreadable (another user's process, EPERM)."""
    data = read_bytes(proc_dir / "environ", limit=4 << 20)
    if data is None:
        return None
    env: dict[str, str] = {}
    for item in data.split(b"\0"):
        name, eq, value = item.decode("utf-8", "replace").partition("=")
        if eq and name:
            env[name] = value
    return env


def read_link(path: Path) -> str | None:
    """``readlink`` or None."""
    try:
        return os.readlink(path)
    except OSError:
        return None


def socket_inodes(proc_dir: Path) -> set[str]:
    """Inodes of the sockets the process holds (``fd/N -> socket:[INODE]``)."""
    inodes: set[str] = set()
    try:
        fds = os.listdir(proc_dir / "fd")
    except OSError:
        return inodes
    for fd in fds:
        target = read_link(proc_dir / "fd" / fd)
        if target and target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def listening_ports(proc_dir: Path) -> set[int] | None:
    """TCP ports the process listens on (``net/tcp{,6}`` rows in state 0A owned by its sockets).

    Returns None when the fd table or the socket tables are unreadable (so the caller
    cannot confirm a port), an empty set when readable and nothing listens.
    """
    inodes = socket_inodes(proc_dir)
    if not inodes:
        return None if not (proc_dir / "fd").is_dir() else set()
    ports: set[int] = set()
    readable = False
    for table in ("tcp", "tcp6"):
        data = read_bytes(proc_dir / "net" / table, limit=16 << 20)
        if data is None:
            continue
        readable = True
        ports |= _listen_rows(data.decode("ascii", "replace"), inodes)
    return ports if readable else None


def _listen_rows(text: str, inodes: set[str]) -> set[int]:
    ports: set[int] = set()
    for line in text.splitlines()[1:]:
        cols = line.split()
        # sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
        if len(cols) >= 10 and cols[3] == TCP_LISTEN and cols[9] in inodes:
            try:
                ports.add(int(cols[1].rsplit(":", 1)[1], 16))
            except (IndexError, ValueError):
                continue
    return ports


def in_namespace(root: Path, pid: int, path: str) -> Path:
    """A path as the process sees it (its mount namespace), reached via ``proc/PID/root``."""
    return root / "proc" / str(pid) / "root" / path.lstrip("/")


# --- reading files with a process's rights ------------------------------
# The agent holds CAP_DAC_READ_SEARCH, so the kernel lets it open any file. A path named in
# another user's argv (--config, --chat-template, a model directory) must not become a way
# to read what that user could not: every such read walks the path component by component
# with directory fds (no check-then-open race on the components), applies the owner/group/
# other permission bits for the process's filesystem uid and groups from
# /proc/<pid>/status, and follows symlinks inside the process's root. POSIX ACLs are not
# modelled: an ACL that grants a reader beyond the mode bits is refused (the safe side).

#: Symlinks followed in one path before giving up (Linux's own limit, path_resolution(7)).
MAX_SYMLINKS = 40


@dataclass(frozen=True)
class Creds:
    """A process's filesystem uid and all its group ids (``Gid`` fs field and ``Groups``)."""

    uid: int
    gids: frozenset[int]


def read_creds(proc_dir: Path) -> Creds | None:
    """``Uid``/``Gid`` (4th field: the filesystem id ``open()`` checks) and ``Groups`` from
    ``<proc_dir>/status`` (proc(5)); None when unreadable or malformed."""
    data = read_bytes(proc_dir / "status", 64 << 10)
    if data is None:
        return None
    fields: dict[str, list[str]] = {}
    for line in data.decode("ascii", "replace").splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.split()
    try:
        uid, gid = int(fields["Uid"][3]), int(fields["Gid"][3])
        groups = {int(g) for g in fields.get("Groups", [])}
    except (KeyError, IndexError, ValueError):
        return None
    return Creds(uid=uid, gids=frozenset(groups | {gid}))


def permits(st: os.stat_result, creds: Creds, bit: int) -> bool:
    """True when ``creds`` hold ``bit`` (4 read, 1 search) on a file with ``st``'s mode."""
    if creds.uid == 0:
        return True
    if st.st_uid == creds.uid:
        return bool((st.st_mode >> 6) & bit)
    if st.st_gid in creds.gids:
        return bool((st.st_mode >> 3) & bit)
    return bool(st.st_mode & bit)


def read_as(ns_root: Path, path: str, creds: Creds, limit: int = 1 << 20,
            tail: bool = False) -> bytes | None:
    """Read the in-namespace absolute ``path`` under ``ns_root`` (``proc/PID/root``) only if
    ``creds`` could: search permission on every directory walked, read permission on the
    regular file reached. None otherwise (missing, denied, not a regular file, loop).
    ``tail``: the last ``limit`` bytes instead of the first (a log's newest lines)."""
    fd = _open_as(ns_root, path, creds)
    if fd is None:
        return None
    try:
        with os.fdopen(fd, "rb") as fh:
            if tail:
                fh.seek(max(0, os.fstat(fh.fileno()).st_size - limit))
            return fh.read(limit)
    except OSError:
        return None


def _open_as(ns_root: Path, path: str, creds: Creds) -> int | None:
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        stack = [os.open(ns_root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)]
    except OSError:
        return None
    parts = [p for p in path.split("/") if p not in ("", ".")]
    hops = 0
    try:
        while parts:
            name = parts.pop(0)
            if name == "..":
                if len(stack) > 1:
                    os.close(stack.pop())
                continue
            if not permits(os.fstat(stack[-1]), creds, 1):
                return None
            st = os.stat(name, dir_fd=stack[-1], follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                hops += 1
                target = os.readlink(name, dir_fd=stack[-1])
                if hops > MAX_SYMLINKS:
                    return None
                if target.startswith("/"):
                    while len(stack) > 1:
                        os.close(stack.pop())
                parts = [p for p in target.split("/") if p not in ("", ".")] + parts
                continue
            fd = os.open(name, flags | (os.O_DIRECTORY if parts else os.O_NONBLOCK),
                         dir_fd=stack[-1])
            stack.append(fd)
        final = os.fstat(stack[-1])
        if len(stack) == 1 or not stat.S_ISREG(final.st_mode) or not permits(final, creds, 4):
            return None
        return stack.pop()
    except OSError:
        return None
    finally:
        for fd in stack:
            os.close(fd)
