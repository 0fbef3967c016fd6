"""Fixtures for agent tests: fake nodes, vLLM emulators, configs.

These tests need no database; run them alone with ``.venv/bin/pytest -p no:django tests/agent``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fa_cases import build_case_node  # noqa: E402
from fa_emulator import VllmBehaviour, VllmEmulator  # noqa: E402
from fa_fakenode import FakeNode  # noqa: E402
from fa_gemma import build_gemma_node, stop_all  # noqa: E402

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


@pytest.fixture
def case_node(node: FakeNode):
    """Every case server on one node, one emulator each, mapped by pid in the config."""
    servers = build_case_node(node)
    emulators = []
    overrides = []
    for server in servers:
        emu = VllmEmulator(VllmBehaviour(
            version=server.version, model_id=f"model-of-{server.case}", root="unknown",
            metrics=server.metrics_file.read_text() if server.metrics_file else ""))
        emulators.append(emu)
        overrides.append(ServerOverride(match_pid=server.pids.server, base_url=emu.base_url))
    yield node, servers, emulators, AgentConfig(servers=overrides)
    for emu in emulators:
        emu.stop()


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
