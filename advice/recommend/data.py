"""Seed operating points (``audit/kb/data/operating_points.yaml``), loaded once.

Only numbers that live nowhere else are in that file (recipes LIGHT/PUSH, the GB10 recipes,
utilisation limits, workload thresholds, named speculators); GPU facts, geometry and the
vetted template are imported from ``audit.kb`` so a number is never written twice.
"""

from __future__ import annotations

from typing import Any

import yaml

from audit.kb.paths import kb_data_file

_FILE = kb_data_file("operating_points.yaml")  # the active KB's table (audit.kb.paths)
OPS: dict[str, Any] = yaml.safe_load(_FILE.read_text(encoding="utf-8"))


def limit(name: str) -> float:
    """``limits.<name>.value`` (e.g. ``util_cliff`` -> 0.94); raises KeyError if absent."""
    return OPS["limits"][name]["value"]


def source(section: str, name: str) -> str:
    """The seed reference of ``<section>.<name>`` (``seed:<file>#<section>``)."""
    return OPS[section][name]["source"]


def workload_value(name: str) -> int:
    """``workload.<name>.value`` in tokens or requests (seed 000 decision guide)."""
    return int(OPS["workload"][name]["value"])


def recipe(name: str) -> dict[str, Any]:
    """One recipe block (``LIGHT``, ``PUSH``, ``GB10-26B-MTP``, ``GB10-31B-EAGLE3``)."""
    return OPS["recipes"][name]


def unified(name: str) -> tuple[Any, str]:
    """(value, source) of a unified-memory (GB10-class) setting."""
    entry = OPS["unified_memory"][name]
    return entry["value"], entry["source"]


def speculators(family: str | None) -> dict[str, dict[str, Any]]:
    """Named speculators for a model family: {method: {config, targets, source}}."""
    return OPS["speculators"].get(family or "", {})


def measurement(name: str) -> dict[str, str]:
    """A cited measurement: {text, source}."""
    return OPS["measurements"][name]


def not_measured(name: str) -> str:
    """Seed 000 "What was NOT measured" item text."""
    return OPS["not_measured"][name]


NOT_MEASURED_REF = "seed:000_ffb301503ad246f2.txt#What was NOT measured"
