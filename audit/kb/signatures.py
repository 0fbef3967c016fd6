"""``log_signatures`` of a rule: checked and compiled at load (audit.kb.engine).

``re`` has no timeout, so the patterns are kept simple instead: at most
:data:`MAX_SIGNATURES` patterns of at most :data:`MAX_SIGNATURE_CHARS` characters, no
backreference and no quantified group that itself contains a quantifier (the shape behind
catastrophic backtracking).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

#: Bounds of ``log_signatures``: patterns per rule and characters per pattern.
MAX_SIGNATURES = 10
MAX_SIGNATURE_CHARS = 200
#: A group that is quantified and contains a quantifier: ``(a+)+``, ``(.*){2,}``.
NESTED_QUANTIFIER_RE = re.compile(r"\([^()]*(?<!\\)[*+?}][^()]*\)\s*[*+?{]")
#: A backreference (``\1``, ``(?P=name)``): not needed for error lines, slow to match.
BACKREF_RE = re.compile(r"\\[1-9]|\(\?P=")


def compile_signatures(raw: Any, fail: Callable[[str], Exception]) -> list[re.Pattern[str]]:
    """Compile ``log_signatures`` (see the module docstring for the checks)."""
    if raw is None:
        return []
    if not isinstance(raw, list) or not raw or len(raw) > MAX_SIGNATURES:
        raise fail(f"log_signatures: expected a list of 1 to {MAX_SIGNATURES} patterns")
    out = []
    for index, pattern in enumerate(raw):
        what = f"log_signatures[{index}]"
        if not isinstance(pattern, str) or not pattern.strip():
            raise fail(f"{what}: expected a non-empty string")
        if len(pattern) > MAX_SIGNATURE_CHARS:
            raise fail(f"{what}: longer than {MAX_SIGNATURE_CHARS} characters")
        if NESTED_QUANTIFIER_RE.search(pattern):
            raise fail(f"{what}: a quantified group contains a quantifier (catastrophic "
                         "backtracking); match a literal phrase instead")
        if BACKREF_RE.search(pattern):
            raise fail(f"{what}: backreferences are not allowed")
        try:
            out.append(re.compile(pattern))
        except re.error as exc:
            raise fail(f"{what}: not a valid regular expression: {exc}") from exc
    return out
