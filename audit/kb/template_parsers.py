"""Check the server's tool-call and reasoning parsers against its chat template's markers.

The agent sends the names of the markup its template renders (``chat_template.markers``,
vocabulary in ``fleet_agent/template_markers.py``); ``data/parser_markers.yaml`` says which
markers each vLLM parser looks for. This holds for any model: no family table is consulted
to decide a mismatch (the family only orders the suggested parsers). Without markers (an
older agent, no readable template) every value is None and the family table
(``model.parsers``, :func:`audit.kb.catalogue.parser_block`) stays the judge.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from audit.kb.catalogue import parsers as family_parsers
from audit.kb.paths import load_data, safe_load_yaml


def _parse(path: Path) -> dict[str, Any]:
    return safe_load_yaml(path.read_text(encoding="utf-8"))


def table() -> dict[str, Any]:
    """The active KB's ``parser_markers.yaml`` (FileNotFoundError when absent)."""
    return load_data("parser_markers.yaml", _parse)


def fits(spec: dict[str, Any], markers: set[str]) -> bool:
    """True when ``markers`` hold every marker of one of ``spec["any"]`` and none of
    ``spec["needs_none"]``."""
    if markers & set(spec.get("needs_none") or []):
        return False
    return any(set(group) <= markers for group in spec.get("any") or [])


def _check(kind: str, parser: Any, markers: set[str], family: str | None) -> dict[str, Any]:
    """One parser kind (``tool`` | ``reasoning``): ``fits`` (bool, None when not judged),
    ``expects`` (the marker sets it looks for), ``suggest`` (parsers that fit this template,
    those the family table gives for ``family`` first; for a parser that does not fit, and
    for no tool-call parser at all on a template that renders tool-call markup)."""
    rows = table()["tool_call_parsers" if kind == "tool" else "reasoning_parsers"]
    markup = set(table()["tool_markup" if kind == "tool" else "reasoning_markup"])
    out: dict[str, Any] = {"parser": parser if isinstance(parser, str) else None,
                           "fits": None, "expects": None, "suggest": [],
                           "markup": sorted(markers & markup)}
    if parser is None or parser == "":
        # No parser at all: a template that renders tool-call markup still says which parser
        # would read it (the flags to add when clients send tools).
        if kind == "tool" and out["markup"]:
            out["suggest"] = _suggest(kind, rows, markers, family)
        return out
    spec = rows.get(parser) if isinstance(parser, str) else None
    if spec is None or (kind == "tool" and not out["markup"]):
        return out  # parser unknown to the table, or a template that renders no tool call
    out["expects"] = [" + ".join(group) for group in spec["any"]]
    out["fits"] = fits(spec, markers)
    if not out["fits"]:
        out["suggest"] = _suggest(kind, rows, markers, family)
    return out


def _suggest(kind: str, rows: dict[str, Any], markers: set[str],
             family: str | None) -> list[str]:
    """The parsers that read this template's markup: the family's own first, the most
    specific (fewest families) first."""
    by_family = family_parsers()["tool_call_parsers" if kind == "tool" else "reasoning_parsers"]
    fitting = [name for name, other in rows.items() if fits(other, markers)]
    own = sorted((name for name in fitting if family and family in (by_family.get(name) or [])),
                 key=lambda name: len(by_family[name]))
    return own + [name for name in fitting if name not in own]


def parser_check(chat_template: dict[str, Any] | None, tool_parser: Any,
                 reasoning_parser: Any, family: str | None) -> dict[str, Any]:
    """``template.parsers`` of a rule context.

    Keys: ``markers`` (list or None), ``known`` (markers were sent), ``tool`` and
    ``reasoning`` (see :func:`_check`), ``mismatch`` ("--flag value" strings of the parsers
    that do not fit), ``steer`` (the first mismatch as ``{flag, direction: "set", value}``
    with the best fitting parser, None when there is none).
    """
    raw = (chat_template or {}).get("markers")
    markers = {m for m in raw if isinstance(m, str)} if isinstance(raw, list) else None
    out: dict[str, Any] = {"markers": sorted(markers) if markers is not None else None,
                           "known": markers is not None, "tool": None, "reasoning": None,
                           "mismatch": [], "steer": None}
    if markers is None:
        return out
    for kind, flag, value in (("tool", "--tool-call-parser", tool_parser),
                              ("reasoning", "--reasoning-parser", reasoning_parser)):
        out[kind] = result = _check(kind, value, markers, family)
        if result["fits"] is False:
            out["mismatch"].append(f"{flag} {value}")
            if out["steer"] is None and result["suggest"]:
                out["steer"] = {"flag": flag, "direction": "set", "value": result["suggest"][0]}
    return out


#: config.json ``model_type`` of the Qwen3 releases that switch thinking per request.
HYBRID_THINKING_TYPES = ("qwen3", "qwen3_moe")
#: Checkpoints of those types that do not switch (the 2507 Instruct/Thinking split, Coder, VL,
#: Next, 3.5/3.6): their config says qwen3 or qwen3_moe, so only the id tells them apart when
#: the template's markers were not read.
_NOT_HYBRID_IDS = ("qwen3-coder", "instruct-2507", "thinking-2507", "qwen3-vl", "qwen3-next",
                   "qwen3.5", "qwen3.6")


def hybrid_thinking(parsers: dict[str, Any], model_type: Any,
                    model_id: Any) -> tuple[bool, str]:
    """``(hybrid, decided_by)``: does the model switch thinking on and off per request (Qwen3's
    ``enable_thinking``)? The template's markers decide when they were read, then config.json
    ``model_type``, then the model id; ``decided_by`` says which, for the finding's evidence.
    ``parsers``: the ``template.parsers`` block (:func:`parser_check`)."""
    name = model_id.lower() if isinstance(model_id, str) else ""
    if parsers.get("known"):
        by, switch = "the chat template's enable_thinking switch", \
            "enable_thinking" in (parsers.get("markers") or [])
    else:
        by, switch = "the model name (no config.json or template markers were read)", True
    if model_type is not None:
        family = model_type in HYBRID_THINKING_TYPES
        by = by if parsers.get("known") else f"config.json model_type {model_type}"
    else:
        family = "qwen3-" in name or "qwen3_" in name
    return (switch and family and not any(word in name for word in _NOT_HYBRID_IDS)), by
