"""The agent tests' fake GPU node: the demo fleet's :class:`demo.procnode.ProcNode` with a
fixed identity (``gpu-node-7``, a fixed machine id, boot time :data:`BTIME`) and fixed
start ticks, so the tests can assert exact values. One fake node for demo and tests
(docs/architecture.md); ``demo.procnode`` imports no Django.
"""

from __future__ import annotations

from pathlib import Path

from demo.procnode import SPAWN_STUB, TRACKER, ProcNode, ServerPids

__all__ = ["BTIME", "SPAWN_STUB", "TRACKER", "FakeNode", "ServerPids"]

BTIME = 1_764_000_000
#: ``stat`` start ticks of processes the tests do not date themselves.
DEFAULT_START_TICKS = 123456


class FakeNode(ProcNode):
    """Builds ``<root>/proc`` and friends under an existing test folder (nothing removed)."""

    def __init__(self, root: Path):
        super().__init__(root, "gpu-node-7", "0123456789abcdef0123456789abcdef",
                         boot_time=BTIME, clean=False)

    def add_process(self, pid: int, ppid: int, argv: list[str], *,
                    start_ticks: int | None = None, started: float | None = None,
                    **kwargs) -> Path:
        if start_ticks is None and started is None:
            start_ticks = DEFAULT_START_TICKS
        return super().add_process(pid, ppid, argv, start_ticks=start_ticks, started=started,
                                   **kwargs)

    def server_start_ticks(self, pid: int, started: float | None) -> int | None:
        """Each server its own start time (the server identity is pid + start time)."""
        return 200000 + pid if started is None else None

    def install_vllm(self, ns: str | None, prefix: str, version: str,
                     site: str = "lib/python3.12/site-packages", replace: bool = False) -> None:
        """As the demo's, but adding beside earlier installs (tests of several versions)."""
        super().install_vllm(ns, prefix, version, site=site, replace=replace)
