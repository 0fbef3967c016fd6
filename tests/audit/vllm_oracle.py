"""The vLLM ground truth (tests/data/vllm-ground-truth), loaded once; missing data fails loudly."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from packaging.version import Version

ORACLE_DIR = Path(__file__).resolve().parents[1] / "data" / "vllm-ground-truth"


@cache
def load(name: str) -> dict:
    """``flags`` | ``batch_defaults`` | ``metrics`` | ``spec_methods`` | ``changes`` -> dict.

    Raises FileNotFoundError (never skips) when the copy is missing."""
    path = ORACLE_DIR / f"{name}.json"
    if not path.is_file():
        raise FileNotFoundError(f"vLLM ground truth missing: {path} (see its README)")
    return json.loads(path.read_text())


def releases() -> list[str]:
    """The releases the oracle covers, oldest first."""
    return sorted(load("flags"), key=Version)
