"""When a metric rule may say "cannot check", and why its metric is missing.

A metric rule (``applies`` + ``needs``, see :mod:`audit.kb.engine`) whose condition stays
false because a metric is missing says so as an info finding. That finding is only useful
when the rule would apply to the server if the metric were there: a Gemma 4 tool-parser rule
says nothing about a server with no tool parser (demo: 212 such findings over 39 hosts).

- :func:`scope_text` keeps the top-level ``&&`` terms of a condition that do not read
  ``metrics``: the rule's server part (``lower(flags.tool_call_parser) == "gemma4"``). The
  engine compiles it with the rule and emits "cannot check" only when it holds.
- :func:`missing_reason` names why the metric is missing, for the remediation: the
  ``--disable-log-stats`` flag when the server sets it; else the release's metric table
  (``audit/kb/data/vllm/<release>.json`` ``metrics``, read from the wheels) when the release
  does not export the metric at all; else the scrape itself.

The split is a small scanner rather than a CEL AST walk because the ``cel`` package exposes
no AST; it only tracks brackets and string literals, and each part is compiled and validated
by CEL like any rule expression.
"""

from __future__ import annotations

import re
from typing import Any

from audit.kb import vllm_tables
from audit.kb.metrics_names import COUNTER_SOURCES, GAUGE_SOURCES, HISTOGRAM_SOURCES
from audit.kb.paths import per_kb

_METRICS_RE = re.compile(r"(?<![\w.])metrics\s*[.\[]")
_OPEN, _CLOSE = "([{", ")]}"


def _top_level_and(expr: str) -> list[str]:
    """``expr`` split at its top-level ``&&`` (outside brackets and string literals)."""
    parts, depth, quote, start, i = [], 0, None, 0, 0
    while i < len(expr):
        ch = expr[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth -= 1
        elif depth == 0 and expr.startswith("&&", i):
            parts.append(expr[start:i])
            start = i + 2
            i += 1
        i += 1
    parts.append(expr[start:])
    return [p.strip() for p in parts if p.strip()]


def scope_text(condition: str) -> str | None:
    """The condition's top-level ``&&`` terms that read no ``metrics`` value, joined with
    ``&&``; None when every term reads metrics (or a top-level ``||`` mixes them)."""
    terms = [t for t in _top_level_and(condition) if not _METRICS_RE.search(t)]
    return " && ".join(f"({t})" for t in terms) or None


def _sources(name: str) -> list[str]:
    table = {**COUNTER_SOURCES, **GAUGE_SOURCES, **HISTOGRAM_SOURCES}
    return [base for base, _priority in table.get(name, [])]


@per_kb  # pure over the release tables; each "cannot check" finding asks per release
def _exported(release: str, name: str) -> bool | None:
    """Whether ``release``'s wheel table lists a /metrics family for canonical ``name``
    (None when the name has no family, e.g. a value derived from others)."""
    sources = _sources(name)
    if not sources:
        return None
    families = vllm_tables.table(release).get("metrics") or {}
    return any(s in families for s in sources)


@per_kb
def _first_release(name: str) -> str | None:
    return next((r for r in vllm_tables.releases() if _exported(r, name)), None)


def missing_reason(ctx: dict[str, Any], gap: dict[str, Any]) -> str:
    """One sentence: why the metrics in ``gap`` (``{"metrics_available", "missing"}``) are
    missing on this server, and what would expose them."""
    flags = ctx.get("flags") or {}
    if flags.get("disable_log_stats") is True:
        return ("--disable-log-stats is set, which removes the vllm:* engine metrics: drop it "
                "to let this be checked")
    if not gap.get("metrics_available"):
        return ("no vllm:* engine metrics were collected although --disable-log-stats is not "
                "set: check that the agent can reach this server's /metrics")
    version = (ctx.get("vllm") or {}).get("version")
    release, _note = vllm_tables.table_release(version)
    absent = [n for n in gap.get("missing") or [] if _exported(release, n) is False]
    if absent:
        firsts = {n: _first_release(n) for n in absent}
        since = ", ".join(f"{n} from vLLM {r}" for n, r in firsts.items() if r)
        return (f"this vLLM release ({version or 'unknown'}, table {release}) does not expose "
                f"{', '.join(absent)}" + (f" (exported: {since})" if since else ""))
    return (f"{', '.join(gap.get('missing') or [])} was absent from this server's /metrics "
            "window (no traffic of that kind yet, or the scrape missed it)")
