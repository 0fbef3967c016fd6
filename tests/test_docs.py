"""docs/knowledge-base.md documents exactly what the rule validator accepts.

A maintainer writes a rule from the doc alone, so every field the validator accepts (and
whether it is required) and every context key a rule may read must be in the doc, and the
doc must not promise a field the validator refuses.
"""

from __future__ import annotations

import re
from pathlib import Path

from audit.kb import cel_functions
from audit.kb.engine import OPTIONAL_FIELDS, REQUIRED_FIELDS, load_rules

DOC = Path(__file__).resolve().parents[1] / "docs" / "knowledge-base.md"


def section(title: str) -> str:
    text = DOC.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


def table_rows(text: str) -> list[list[str]]:
    return [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in text.splitlines() if re.match(r"^\|\s*`", line)]


def test_the_documented_rule_fields_are_the_validators() -> None:
    rows = {row[0].strip("`"): row[1] for row in table_rows(section("Rule fields"))}
    assert {f for f, need in rows.items() if need == "required"} == set(REQUIRED_FIELDS)
    assert {f for f, need in rows.items() if need == "optional"} == set(OPTIONAL_FIELDS)


def test_the_documented_cel_functions_are_the_engines() -> None:
    rows = table_rows(section("CEL functions"))
    documented = {row[0].strip("`").split("(")[0] for row in rows}
    assert documented == set(cel_functions.FUNCTION_NAMES)


def test_every_context_key_a_rule_may_read_is_documented_with_a_type() -> None:
    text = section("Context reference")
    documented: set[str] = set()
    for block in re.split(r"\n### ", text)[1:]:
        name = block.splitlines()[0].strip("` ")
        documented |= {f"{name}.{row[0].strip('`')}" for row in table_rows(block) if row[1]}
    fields = load_rules().settings["context_fields"]
    accepted = {f"{block}.{key}" for block, keys in fields.items() for key in keys}
    assert documented == accepted
