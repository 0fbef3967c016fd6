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


def template_context(chat_template: dict[str, Any] | None) -> dict[str, Any]:
    """The ``template`` block of a rule context from the report's ``chat_template`` dict.

    Keys: ``sha256``, ``size_bytes``, ``source``, ``identity``, ``label``, ``pulled``,
    ``revision``, ``valid_hash`` (64 lower-case hex). ``identity`` is None when no template
    (or no hash) was reported, ``unknown`` for a hash not in the table.
    """
    template = chat_template or {}
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
    }


#: The agent's error when it read the model's tokenizer files (a local model directory or the
#: Hugging Face cache snapshot) and found none of chat_template.jinja, chat_template.json or a
#: ``chat_template`` in tokenizer_config.json (fleet_agent/ondisk.py ``chat_template``,
#: ``NO_TEMPLATE_IN_FILES``). Any other template error (not in the cache, not readable) means
#: it could not look; so does older agents' "no chat template in X", which they sent whether
#: or not they could read a file of X.
_NONE_IN_FILES = re.compile(r"^chat template: no chat template in the tokenizer files read "
                            r"from ")


def model_file_lines(errors: list[Any] | None) -> list[str]:
    """The agent's "no chat template in <the model's files>" lines among a server's errors:
    facts about the checkpoint, not the running process, so they hold for any command that
    serves the same model (the recommendation's self-check carries them over)."""
    return [str(e) for e in errors or [] if _NONE_IN_FILES.match(str(e))]


#: Tokenizer modes that load a Hugging Face tokenizer (its chat template or none); other modes
#: (mistral's mistral_common, model-specific encoders) format chats without a Jinja template.
_HF_TOKENIZER_MODES = {"auto", "hf", "slow"}
#: Runners/tasks that serve no chat endpoint (pooling models: embeddings, scores, rewards).
_POOLING = {"embed", "embedding", "score", "classify", "reward", "pooling"}


def absence(chat_template: dict[str, Any] | None, errors: list[Any],
            values: dict[str, Any]) -> tuple[bool, str | None]:
    """``(absent, why)``: the served model has no chat template and the server passes none, so
    ``/v1/chat/completions`` cannot format a conversation. transformers dropped its class
    default templates in v4.44 (its "default chat template is no longer allowed" error, which
    vLLM returns for each chat request), so nothing stands in for the missing one.

    True only when the agent looked: no template reported, no ``--chat-template`` in argv,
    and the agent's own "no chat template in <the model's files>" error. Not judged for a
    ``.gguf`` model or tokenizer (GGUF metadata may embed a template the agent does not
    read), a ``--tokenizer-mode`` other than auto/hf/slow (mistral_common and model-specific
    encoders format chats without a template) or a pooling runner/task. ``values``: the
    parsed argv (:func:`audit.kb.flags.parse_argv`)."""
    if chat_template or values.get("chat_template"):
        return False, None
    said = next(iter(model_file_lines(errors)), None)
    if said is None:
        return False, None
    source = values.get("tokenizer") or values.get("model")
    if isinstance(source, str) and source.lower().endswith(".gguf"):
        return False, None
    if str(values.get("tokenizer_mode") or "auto").lower() not in _HF_TOKENIZER_MODES:
        return False, None
    if _POOLING & {str(values.get(k) or "").lower() for k in ("task", "runner", "convert")}:
        return False, None
    return True, said.split(": ", 1)[1]
