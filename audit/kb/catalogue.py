"""One decision per server about the model: its family, its config and how both were found.

Order:

1. the node's ``model_files.config`` (``model_type`` of the config or of its text config,
   else ``architectures``) -> family through ``model_types`` of ``data/model_catalogue.yaml``;
   a ``models.yaml`` row matching the name refines it when it agrees (Gemma 4 31B vs 26B), and
   a Gemma 4 served from an anonymous path (``/model``) is matched to the row with its layer
   count, so every Gemma 4 rule applies;
2. no config: a ``models.yaml`` row by name (the hand-sourced Gemma-era table), then a
   catalogue entry by name (its ``config`` facts stand in for the node's), then the family
   patterns of the catalogue;
3. else parameters read from the name (``30B``, ``A3B``; quantisation from the markers in
   :func:`audit.kb.geometry.detect_quantization`), marked as an estimate; else unknown
   ("cannot check").

:func:`decide` returns ``{"family", "family_source", "config", "config_source",
"table_row", "estimate"}``; ``config`` is None when nothing gives the geometry.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from audit.kb.geometry import find_model, models_table
from audit.kb.paths import load_data, safe_load_yaml

Catalogue = tuple[dict[str, str], list[dict[str, Any]], list[tuple[re.Pattern, str]]]


def _parse(path: Path) -> Catalogue:
    data = safe_load_yaml(path.read_text(encoding="utf-8"))
    entries = data["models"]
    for row in entries:
        row["_re"] = [re.compile(p, re.IGNORECASE) for p in row["match"]]
    families = [(re.compile(f["match"], re.IGNORECASE), f["family"]) for f in data["families"]]
    return data["model_types"], entries, families


def catalogue() -> Catalogue:
    """(model_type -> family, catalogue entries, family name patterns) of the active KB's
    ``model_catalogue.yaml`` (an installed bundle's once one is: :func:`audit.kb.paths.
    load_data`, re-read when it changes). A missing file raises FileNotFoundError naming it."""
    return load_data("model_catalogue.yaml", _parse)


def _load_parsers(path: Path) -> dict[str, dict[str, list[str]]]:
    return safe_load_yaml(path.read_text(encoding="utf-8"))


def parsers() -> dict[str, dict[str, list[str]]]:
    """The active KB's ``parsers.yaml``: {tool_call_parsers, reasoning_parsers} -> parser ->
    families it serves (same loading as :func:`catalogue`)."""
    return load_data("parsers.yaml", _load_parsers)

_ARCH_HINTS = (("gemma4", "gemma4"), ("gemma3", "gemma3"), ("qwen3", "qwen3"),
               ("qwen2", "qwen2.5"), ("llama4", "llama4"), ("mllama", "mllama"),
               ("llama", "llama"), ("mixtral", "mixtral"), ("mistral", "mistral"),
               ("deepseek", "deepseek"), ("glm4moe", "glm"), ("gptoss", "gpt-oss"),
               ("minimax", "minimax"), ("kimi", "kimi"), ("nemotronh", "nemotron-h"))
_PARAMS = re.compile(r"(?<![a-z0-9.])(\d+(?:\.\d+)?)b(?![a-z0-9])", re.IGNORECASE)
_ACTIVE = re.compile(r"(?<![a-z0-9])a(\d+(?:\.\d+)?)b(?![a-z0-9])", re.IGNORECASE)


def family_of_config(config: dict[str, Any]) -> tuple[str | None, str | None]:
    """(family, what decided it) from ``model_type`` / text ``model_type`` / architectures."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    for label, value in (("model_type", config.get("model_type")),
                         ("text_config.model_type", text.get("model_type"))):
        model_types = catalogue()[0]
        if isinstance(value, str) and value in model_types:
            return model_types[value], f"config.json {label} {value}"
    archs = config.get("architectures")
    for arch in archs[:8] if isinstance(archs, list) else []:
        squashed = str(arch).lower().replace("_", "")
        for marker, family in _ARCH_HINTS:
            if marker in squashed:
                return family, f"config.json architectures {arch}"
    return None, None


def _agrees(row_family: str, family: str) -> bool:
    return row_family == family or row_family.startswith(family + "-") \
        or family.startswith(row_family)


def _row_by_layers(family: str, layers: int | None) -> dict[str, Any] | None:
    if not layers:
        return None
    for row in models_table():
        if _agrees(row["family"], family) and row.get("layers") == layers:
            return row
    return None


def catalogue_entry(*hints: str | None) -> dict[str, Any] | None:
    """First catalogue entry whose pattern matches a hint."""
    for hint in hints:
        for row in catalogue()[1]:
            if hint and any(p.search(hint) for p in row["_re"]):
                return row
    return None


def family_by_name(*hints: str | None) -> str | None:
    """Family from the catalogue's name patterns (no geometry)."""
    for hint in hints:
        for pattern, family in catalogue()[2]:
            if hint and pattern.search(hint):
                return family
    return None


def params_from_name(*hints: str | None) -> tuple[float | None, float | None]:
    """(total, active) billions of parameters written in a model name (``30B``, ``A3B``)."""
    for hint in hints:
        if not hint:
            continue
        name = hint.rstrip("/").rsplit("/", 1)[-1]
        active = _ACTIVE.search(name)
        totals = [m for m in _PARAMS.finditer(name) if not (active and m.start() ==
                                                            active.start() + 1)]
        if totals:
            return float(totals[0].group(1)), float(active.group(1)) if active else None
    return None, None


def decide(config: dict[str, Any] | None, hints: list[str]) -> dict[str, Any]:
    """The model decision of one server (see the module docstring)."""
    out: dict[str, Any] = {"family": None, "family_source": None, "config": None,
                           "config_source": None, "table_row": None, "estimate": False,
                           "hints": list(hints)}
    if isinstance(config, dict) and config:
        out.update(config=config, config_source="config.json from the node")
        family, how = family_of_config(config)
        if family:
            _refine(out, family, how, config, hints)
            return out
    row = find_model(*hints)
    entry = catalogue_entry(*hints)
    if out["config"] is None and entry is not None:
        out.update(config=entry["config"], config_source=f"catalogue {entry['key']}: "
                                                          f"{entry['source']}")
    if row is not None:
        out.update(family=row["family"], table_row=row,
                   family_source=f"model name matches models.yaml {row['key']}")
    elif entry is not None:
        out.update(family=entry["family"], family_source=f"model name matches catalogue "
                                                         f"{entry['key']}")
    else:
        family = family_by_name(*hints)
        if family:
            out.update(family=family, family_source="model name (family pattern)")
    return out


def _refine(out: dict[str, Any], family: str, how: str, config: dict[str, Any],
            hints: list[str]) -> None:
    row = find_model(*hints)
    if row is not None and _agrees(row["family"], family):
        out.update(family=row["family"], table_row=row,
                   family_source=f"{how}; name matches models.yaml {row['key']}")
        return
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    by_layers = _row_by_layers(family, text.get("num_hidden_layers"))
    if by_layers is not None:
        out.update(family=by_layers["family"], table_row=by_layers,
                   family_source=f"{how}; {by_layers['layers']} layers = models.yaml "
                                 f"{by_layers['key']}")
        return
    out.update(family=family, family_source=how)


def parser_block(family: str | None, decided: bool, tool: Any, reasoning: Any
                 ) -> dict[str, Any]:
    """``model.parsers``: for each family-specific parser in use (``data/parsers.yaml``),
    whether the decided family is one it serves. ``mismatch`` lists "--flag value (fits
    families)" strings; empty when the family is undecided or the parser is generic."""
    out: dict[str, Any] = {"mismatch": [], "tool_fits": None, "reasoning_fits": None}
    if not decided or not family or family.startswith("gemma4"):
        return out  # Gemma 4 parsers: up-tool-/up-reasoning-parser-model-mismatch
    base = family.split("-")[0] if family.startswith(("gemma", "glm4-")) else family
    for key, flag, value in (("tool_fits", "--tool-call-parser", tool),
                             ("reasoning_fits", "--reasoning-parser", reasoning)):
        table = parsers()["tool_call_parsers" if key == "tool_fits" else "reasoning_parsers"]
        fits = table.get(str(value)) if isinstance(value, str) else None
        if fits is None:
            continue
        out[key] = family in fits or base in fits
        if not out[key]:
            out["mismatch"].append(f"{flag} {value} (fits {', '.join(fits)})")
    return out
