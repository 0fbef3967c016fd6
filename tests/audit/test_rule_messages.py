"""Every rule message renders clean, with and without its optional evidence: no placeholder
left unrendered, no literal "none" or Python repr where a sentence expected text."""

from __future__ import annotations

import re
import string

import pytest

from audit.kb.engine import _FORMATTER, load_rules

KB = load_rules()


def _render(message: str, evidence: dict) -> str:
    return " ".join(_FORMATTER.vformat(message, (), evidence).split())


def _names(message: str) -> list[str]:
    return [name for _, name, _, _ in string.Formatter().parse(message) if name]


@pytest.mark.parametrize("rule", KB.rules, ids=lambda r: r.id)
def test_a_message_renders_with_its_evidence_absent_or_blank(rule) -> None:
    names = _names(rule.message)
    literal_none = len(re.findall(r"\bnone\b", rule.message, re.IGNORECASE))
    for blank in ("", None):
        text = _render(rule.message, dict.fromkeys(names, blank))
        assert not re.search(r"\{[a-z_]+\}", text), text
        assert "None" not in text.replace("none", "")  # no Python repr
        # an empty optional text (a probe summary before any probe) reads as nothing
        assert len(re.findall(r"\bnone\b", text, re.IGNORECASE)) == literal_none, text


@pytest.mark.parametrize("rule", KB.rules, ids=lambda r: r.id)
def test_a_message_renders_with_every_kind_of_value(rule) -> None:
    names = _names(rule.message)
    for value in (1, 0.5, 12345.678, "text", True, ["a", "b"], {"k": 1}):
        text = _render(rule.message, dict.fromkeys(names, value))
        assert not re.search(r"\{[a-z_]+\}", text), text


def test_a_probe_summary_that_is_empty_leaves_no_word_behind() -> None:
    rule = next(r for r in KB.rules if "{probe}" in r.message)
    text = _render(rule.message, {n: "x" for n in _names(rule.message)} | {"probe": ""})
    assert not text.rstrip(".").endswith("none")
