"""Fixtures for agent tests: fake nodes, vLLM emulators, configs.

The fake node, the vLLM endpoint emulator and the case loader are the demo fleet's
(``demo.procnode``, ``demo.emulator``, ``demo.cases``), which import no Django, Celery or
psycopg (tests/test_architecture.py checks). These tests need no database; run them alone
with ``.venv/bin/pytest -p no:django tests/agent``.
"""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fa_fakenode import FakeNode, ServerPids  # noqa: E402
from fa_gemma import build_gemma_node, stop_all  # noqa: E402

from demo.cases import Case, place_cases  # noqa: E402
from demo.emulator import Behaviour, Emulator  # noqa: E402
from demo.paths import capture_paths  # noqa: E402
from fleet_agent.collect import CycleInput, collect  # noqa: E402
from fleet_agent.config import AgentConfig, ServerOverride  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def node(tmp_path: Path) -> FakeNode:
    """An empty fake node (init only)."""
    return FakeNode(tmp_path / "root")


@pytest.fixture
def gemma_node(node: FakeNode):
    """The four-server Gemma node of :mod:`fa_gemma`, emulators running."""
    servers = build_gemma_node(node)
    yield node, servers
    stop_all(servers)


@dataclass
class CaseOnNode:
    """A case's server placed on the fake node and the real ``/metrics`` capture its
    emulator serves (``capture``)."""

    case: Case
    pids: ServerPids
    capture: Path


@pytest.fixture
def case_node(node: FakeNode):
    """Every case server on one node, one emulator each (the real captures, round robin),
    mapped by pid in the config."""
    captures = capture_paths()
    servers = [CaseOnNode(case, pids, captures[i % len(captures)])
               for i, (case, pids) in enumerate(place_cases(node))]
    emulators = []
    overrides = []
    for server in servers:
        emu = Emulator(Behaviour(
            version=server.case.server.version, model_id=f"model-of-{server.case.name}",
            root="unknown", max_model_len=65536,
            metrics=server.capture.read_text()))
        emulators.append(emu)
        overrides.append(ServerOverride(match_pid=server.pids.server, base_url=emu.base_url))
    yield node, servers, emulators, AgentConfig(servers=overrides)
    # Each stop waits out its emulator's poll interval (0.2 s): all at once, not one by one.
    with ThreadPoolExecutor(len(emulators)) as pool:
        list(pool.map(Emulator.stop, emulators))


@pytest.fixture
def run_collect():
    """Collect a report from a fake node: ``run_collect(node, config=None, gpu_source="none")``."""
    def _run(node: FakeNode, config: AgentConfig | None = None, gpu_source: str = "none",
             probe_http: bool = True):
        return collect(CycleInput(config=config or AgentConfig(), root=node.root,
                                  gpu_source=gpu_source, probe_http=probe_http))
    return _run


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    """Agent tests touch no Django cache; this shadows tests/conftest.py's autouse fixture so
    ``pytest -p no:django tests/agent`` runs without Django settings."""
