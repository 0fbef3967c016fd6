"""Seed operating points (``audit/kb/data/operating_points.yaml``, or an installed KB
bundle's copy), read through :func:`audit.kb.paths.load_data`: parsed once per file version,
re-read when the active bundle changes; a missing file raises FileNotFoundError naming it at
first use (never at import).

Only numbers that live nowhere else are in that file (recipes LIGHT/PUSH, the GB10 recipes,
utilisation limits, workload thresholds, named speculators); GPU facts, geometry and the
vetted template are imported from ``audit.kb`` so a number is never written twice.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from audit.kb.paths import load_data, safe_load_yaml


def _parse(path: Path) -> dict[str, Any]:
    return safe_load_yaml(path.read_text(encoding="utf-8"))


def ops() -> dict[str, Any]:
    """The whole ``operating_points.yaml`` of the active KB."""
    return load_data("operating_points.yaml", _parse)


def limit(name: str) -> float:
    """``limits.<name>.value`` (e.g. ``util_cliff`` -> 0.94); raises KeyError if absent."""
    return ops()["limits"][name]["value"]


def source(section: str, name: str) -> str:
    """The seed reference of ``<section>.<name>`` (``seed:<file>#<section>``)."""
    return ops()[section][name]["source"]


def workload_value(name: str) -> int:
    """``workload.<name>.value`` in tokens or requests (seed 000 decision guide)."""
    return int(ops()["workload"][name]["value"])


def recipe(name: str) -> dict[str, Any]:
    """One recipe block (``LIGHT``, ``PUSH``, ``GB10-26B-MTP``, ``GB10-31B-EAGLE3``)."""
    return ops()["recipes"][name]


def unified(name: str) -> tuple[Any, str]:
    """(value, source) of a unified-memory (GB10-class) setting."""
    entry = ops()["unified_memory"][name]
    return entry["value"], entry["source"]


def speculators(family: str | None) -> dict[str, dict[str, Any]]:
    """Named speculators for a model family: {method: {config, targets, source}}."""
    return ops()["speculators"].get(family or "", {})


def measurement(name: str) -> dict[str, str]:
    """A cited measurement: {text, source}."""
    return ops()["measurements"][name]


def not_measured(name: str) -> str:
    """Seed 000 "What was NOT measured" item text."""
    return ops()["not_measured"][name]


NOT_MEASURED_REF = "seed:000_ffb301503ad246f2.txt#What was NOT measured"
