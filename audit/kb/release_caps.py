"""What each known vLLM release can serve: the extracted capability tables, and lookups.

Tables: ``data/vllm/capabilities/<release>.json`` of the active KB (written by ``manage.py
vllm_extract WHEEL --out audit/kb/data/vllm``; shape in
:mod:`audit.kb.vllm_extract.capabilities`). Read through :func:`audit.kb.paths.load_data`
so an installed bundle's tables apply at once. A known release without a capability table
raises FileNotFoundError naming it (a loud failure, never an empty answer).

The release whose table applies to a running version is the one :func:`audit.kb.vllm_tables.
table_release` picks (nearest at or below it). :func:`first_release_with` answers "the
nearest release that supports it" for a finding: the oldest known release after ``after``
whose table satisfies a predicate.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from packaging.version import Version

from audit.kb.paths import load_data, per_kb
from audit.kb.vllm_tables import releases


def _parse(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def caps(release: str) -> dict[str, Any]:
    """The capability table of one known release (FileNotFoundError when not shipped)."""
    return load_data(f"vllm/capabilities/{release}.json", _parse)


def first_release_with(predicate: Callable[[dict[str, Any]], bool],
                       after: str | None = None) -> str | None:
    """Oldest known release newer than ``after`` (all when None) whose table satisfies
    ``predicate``; None when no known release does."""
    floor = Version(after) if after else None
    for release in releases():
        if floor is not None and Version(release) <= floor:
            continue
        if predicate(caps(release)):
            return release
    return None


@per_kb
def architecture_index() -> dict[str, tuple[str, ...]]:
    """Architecture -> the known releases that register it (oldest first)."""
    found: dict[str, list[str]] = {}
    for release in releases():
        for arch in caps(release)["architectures"]:
            found.setdefault(arch, []).append(release)
    return {arch: tuple(rels) for arch, rels in found.items()}


def backend(release: str, name: str) -> dict[str, Any] | None:
    """One attention backend's entry in ``release`` (None when the release lacks it)."""
    return caps(release)["attention_backends"].get(name)
