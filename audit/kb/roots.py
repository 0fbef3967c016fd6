"""The context blocks a set of rules reads, so an evaluation converts only those.

Converting a whole rule context into a ``cel.Context`` is most of an evaluation's CPU (the
``flags_meta`` block alone is about half of it) while the metric rules read eight of its
sixteen blocks. :func:`roots` lists the variables every expression of the rules reads
(``cel.Program.variables()``, comprehension variables included, so a superset): an
expression never reads a block it does not name, so leaving the others out of the
activation changes no result. Pure; no Django.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def programs(rule: Any) -> list[Any]:
    """Every compiled expression of ``rule`` (:class:`audit.kb.engine.Rule`) that runs
    against the activation: condition, applies, scope, escalations, evidence, steer value."""
    found = [rule.condition, *(when for when, _ in rule.escalate), *rule.evidence.values()]
    found += [p for p in (rule.applies, rule.scope) if p is not None]
    value = (rule.steer or {}).get("value")
    return found + ([value] if value is not None else [])


def roots(rules: Iterable[Any], cadence: str | None) -> frozenset[str]:
    """Names of the variables the expressions of ``rules`` of ``cadence`` (None: all) read."""
    names: set[str] = set()
    for rule in rules:
        if cadence is None or rule.cadence == cadence:
            names.update(*(program.variables() for program in programs(rule)))
    return frozenset(names)


def roots_of(kb: Any, cadence: str | None) -> frozenset[str]:
    """:func:`roots` of ``kb``'s rules (:class:`audit.kb.engine.KnowledgeBase`) of
    ``cadence``, kept on ``kb`` once per rule list (a replaced list is read anew)."""
    cache = kb.__dict__.setdefault("_roots_cache", {})
    key = (cadence, id(kb.rules), len(kb.rules))
    if key not in cache:
        cache[key] = roots(kb.rules, cadence)
    return cache[key]
