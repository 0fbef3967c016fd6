"""Identify a served chat template from its sha256 and size.

The seed publishes hashes abbreviated as ``prefix…suffix`` plus the byte size
(``data/templates.yaml``), so a full 64-hex hash matches a row only when its prefix, its
suffix and the size all agree. Identity: ``vetted`` | ``frozen`` | ``intermediate`` |
``unknown`` (a hash we have not vetted) | None (no template reported).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from audit.kb.paths import load_data, safe_load_yaml
from fleet_agent.ondisk import NO_TEMPLATE_IN_FILES

_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def _parse(path: Path) -> list[dict[str, Any]]:
    rows = safe_load_yaml(path.read_text(encoding="utf-8"))["templates"]
    for row in rows:
        row["prefix"], row["suffix"] = str(row["prefix"]).lower(), str(row["suffix"]).lower()
        row["pulled"] = str(row.get("pulled")) if row.get("pulled") else None
    return rows


def _load() -> list[dict[str, Any]]:
    """The active KB's ``templates.yaml`` (follows an installed bundle, see audit.kb.paths)."""
    return load_data("templates.yaml", _parse)


def active_rows() -> list[dict[str, Any]]:
    """The active KB's template rows (follows an installed bundle), not the import-time copy."""
    return _load()


def match(sha256: str | None, size_bytes: int | None) -> dict[str, Any] | None:
    """The table row whose prefix, suffix and size all match, else None.

    A size of None never matches (the seed's fingerprints need all three parts).
    """
    if not sha256 or size_bytes is None:
        return None
    digest = sha256.strip().lower()
    for row in _load():
        if digest.startswith(row["prefix"]) and digest.endswith(row["suffix"]) \
                and int(size_bytes) == int(row["size_bytes"]):
            return row
    return None


def template_context(chat_template: dict[str, Any] | None,
                     errors: list[str] | None = None) -> dict[str, Any]:
    """The ``template`` block of a rule context from the report's ``chat_template`` dict.

    Keys: ``sha256``, ``size_bytes``, ``source``, ``identity``, ``label``, ``pulled``,
    ``revision``, ``valid_hash`` (64 lower-case hex). ``identity`` is None when no template
    (or no hash) was reported, ``unknown`` for a hash not in the table. ``none_in_model_files``:
    no ``--chat-template`` and the agent read the model's own files (local directory or HF
    cache snapshot: ``chat_template.jinja``, ``chat_template.json``, ``tokenizer_config.json``)
    and found no template in them (its error line, ``server.errors``); False when a template
    was reported or the files were not read.
    """
    template = chat_template or {}
    prefix = f"chat template: {NO_TEMPLATE_IN_FILES}"
    none_in_files = not template and any(
        isinstance(e, str) and e.startswith(prefix) for e in errors or [])
    sha = template.get("sha256")
    size = template.get("size_bytes")
    row = match(sha, size)
    identity = None if not sha else (row["identity"] if row else "unknown")
    return {
        "sha256": sha, "size_bytes": size, "source": template.get("source"),
        "identity": identity, "label": row["label"] if row else None,
        "pulled": row["pulled"] if row else None,
        "revision": row.get("revision") if row else None,
        "valid_hash": bool(sha and _HEX64.match(sha.strip().lower())),
        "none_in_model_files": none_in_files,
    }
