"""On-disk spool of undelivered reports and the agent's small state file.

One gzipped JSON report per file, named ``<20-digit ns timestamp>-<report_id>.json.gz``
so that a lexical sort is the collection order (a new name is always greater than
every existing one, even if the clock steps back). Writes go through a temp file and
``os.replace`` so a crash never leaves half a report. Bounded by a count and a byte
total; the oldest reports are dropped first and counted in ``state.json``
(``spool_dropped``, reported as ``agent.spool_dropped``).

Reports are redacted but still describe the node, so the spool directory is ``0700`` and
every file ``0600``; :func:`private_dir` also tightens a directory and
files an older agent left world-readable.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SUFFIX = ".json.gz"
DIR_MODE = 0o700
FILE_MODE = 0o600


def private_dir(directory: Path) -> None:
    """Create ``directory`` as 0700 (or tighten it) and make the files in it 0600."""
    directory.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    os.chmod(directory, DIR_MODE)
    with os.scandir(directory) as found:
        for item in found:
            if item.is_file(follow_symlinks=False):
                with contextlib.suppress(FileNotFoundError):
                    os.chmod(item.path, FILE_MODE)


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a 0600 temp file, fsync, then rename into place."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    with os.fdopen(fd, "wb") as fh:
        os.fchmod(fh.fileno(), FILE_MODE)  # an existing temp file keeps its old mode otherwise
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


@dataclass
class SpoolEntry:
    """A spooled report file; ``size`` in bytes (gzipped)."""

    path: Path
    size: int

    @property
    def report_id(self) -> str:
        """The report_id encoded in the file name."""
        return self.path.name[:-len(SUFFIX)].split("-", 1)[1]


class StateFile:
    """``state.json``: drop counter, last delivery outcome, last collection summary."""

    def __init__(self, path: Path):
        self.path = path

    def read(self) -> dict[str, Any]:
        """The state dict; empty when missing or corrupt (never raises)."""
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError, RecursionError):
            return {}
        return data if isinstance(data, dict) else {}

    def update(self, **values: Any) -> dict[str, Any]:
        """Merge ``values`` into the state and write it atomically; returns the new state."""
        state = self.read()
        state.update(values)
        self.path.parent.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        write_private(self.path, json.dumps(state, indent=1, sort_keys=True,
                                            default=str).encode())
        return state


class Spool:
    """Directory of pending reports, oldest first, bounded by ``max_reports`` and ``max_bytes``."""

    def __init__(self, directory: Path, max_reports: int, max_bytes: int, state: StateFile):
        self.dir = directory
        self.max_reports = max(1, max_reports)
        self.max_bytes = max(1, max_bytes)
        self.state = state
        self._private = False

    def entries(self) -> list[SpoolEntry]:
        """Pending reports, oldest first; missing directory means empty."""
        try:
            names = sorted(n for n in os.listdir(self.dir) if n.endswith(SUFFIX)
                           and not n.startswith("."))
        except OSError:
            return []
        out = []
        for name in names:
            try:
                out.append(SpoolEntry(self.dir / name, (self.dir / name).stat().st_size))
            except OSError:
                continue  # delivered and removed concurrently
        return out

    def depth(self) -> int:
        """Number of pending reports."""
        return len(self.entries())

    def dropped(self) -> int:
        """Reports dropped so far because the spool was full (persisted)."""
        value = self.state.read().get("spool_dropped", 0)
        return value if isinstance(value, int) else 0

    def _next_stamp(self, entries: list[SpoolEntry]) -> int:
        stamp = time.time_ns()
        if entries:
            prefix = entries[-1].path.name.split("-", 1)[0]
            if prefix.isdigit():
                stamp = max(stamp, int(prefix) + 1)
        return stamp

    def put(self, report_id: str, body_gz: bytes) -> Path:
        """Store one gzipped report, then enforce the bounds (oldest dropped first)."""
        if not self._private:  # once per process: also tightens what an older agent left
            private_dir(self.dir)
            self._private = True
        entries = self.entries()
        path = self.dir / f"{self._next_stamp(entries):020d}-{report_id}{SUFFIX}"
        write_private(path, body_gz)
        self._enforce(entries + [SpoolEntry(path, len(body_gz))])
        return path

    def _enforce(self, entries: list[SpoolEntry]) -> None:
        total = sum(e.size for e in entries)
        dropped = 0
        # Keep the newest report even if it alone exceeds max_bytes: it is the current state.
        while len(entries) > 1 and (len(entries) > self.max_reports or total > self.max_bytes):
            oldest = entries.pop(0)
            total -= oldest.size
            self.remove(oldest)
            dropped += 1
        if dropped:
            self.state.update(spool_dropped=self.dropped() + dropped)

    def set_aside(self, entry: SpoolEntry, keep: int = 10) -> Path | None:
        """Move a report the dashboard refused (4xx) into ``rejected/`` for inspection,
        keeping the ``keep`` newest there; returns its new path (None if it vanished).
        The drain then goes on with the next report instead of retrying this one forever."""
        rejected = self.dir / "rejected"
        rejected.mkdir(mode=DIR_MODE, exist_ok=True)
        target = rejected / entry.path.name
        try:
            os.replace(entry.path, target)
        except FileNotFoundError:
            return None
        for old in sorted(rejected.iterdir())[:-keep]:
            with contextlib.suppress(FileNotFoundError):
                old.unlink()
        return target

    def remove(self, entry: SpoolEntry) -> None:
        """Delete a delivered (or rejected) report; already gone is fine."""
        with contextlib.suppress(FileNotFoundError):
            entry.path.unlink()

    def read(self, entry: SpoolEntry) -> bytes | None:
        """The gzipped body, None if it vanished."""
        try:
            return entry.path.read_bytes()
        except OSError:
            return None
