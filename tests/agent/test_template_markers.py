"""The agent sends a template's markers, never its text, within the wire contract."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from fleet_agent import ondisk
from fleet_agent.schema import ChatTemplate
from fleet_agent.template_markers import VOCABULARY, extract

TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "chat_templates"


def test_found_template_carries_markers_and_no_text() -> None:
    data = (TEMPLATES / "Qwen3-Coder.jinja").read_bytes()
    found = ondisk.template_from_files(
        lambda name: data if name == "chat_template.jinja" else None, "/m/", None)
    sent = ChatTemplate.model_validate(vars(found)).model_dump()
    assert sent["markers"] == ["function_xml", "parameter_xml", "tool_call_tag"]
    body = json.dumps(sent)
    assert "<function=" not in body and "{%" not in body


def test_every_marker_of_the_real_templates_is_in_the_vocabulary() -> None:
    seen = set()
    for path in TEMPLATES.glob("*.jinja"):
        seen |= set(extract(path.read_bytes()))
    assert seen <= set(VOCABULARY)
    assert len(seen) >= 18  # the shipped families cover most of the vocabulary


def test_prefilled_think_is_told_from_an_empty_pair() -> None:
    gen = ("{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{{- 'BODY' }}"
           "{%- endif %}")
    assert "think_prefilled" in extract(gen.replace("BODY", "<think>\\n"))
    assert "think_prefilled" not in extract(gen.replace("BODY", "<think>\\n\\n</think>\\n"))


def test_old_agents_without_markers_and_newer_names_are_accepted() -> None:
    base = {"sha256": "a" * 64, "size_bytes": 10}
    assert ChatTemplate.model_validate(base).markers is None
    assert ChatTemplate.model_validate({**base, "markers": ["future_marker"]}).markers == [
        "future_marker"]
    with pytest.raises(ValidationError, match="markers"):
        ChatTemplate.model_validate({**base, "markers": ["<think>"]})
    with pytest.raises(ValidationError, match="markers"):
        ChatTemplate.model_validate({**base, "markers": ["x"] * 129})
