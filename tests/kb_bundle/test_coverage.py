"""Coverage of the knowledge base: releases from version literals, families from rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from audit.kb.coverage import ANY_MODEL, coverage, covers, rule_families, version_tests
from audit.kb.engine import RuleError, load_rules
from audit.kb.paths import BUILTIN_RULES_DIR

RULE = """
rules:
  - id: cov-test-rule
    title: "A Qwen 3 issue on 0.25.x"
    kind: known_issue
    severity: medium
    cadence: config
    condition: 'version_in(vllm.version, ">=0.25.0,<0.26.0") && model.id != null'
    message: "m"
    remediation: "r"
    references: ["https://docs.vllm.ai/en/latest/"]
    last_verified: 2026-11-30
{extra}
"""


def _load(tmp_path: Path, extra: str = ""):
    (tmp_path / "_kb.yaml").write_bytes((BUILTIN_RULES_DIR / "_kb.yaml").read_bytes())
    (tmp_path / "cov.yaml").write_text(RULE.format(extra=extra))
    return load_rules([tmp_path])


def test_a_version_range_counts_only_for_the_releases_inside_it(tmp_path):
    kb = _load(tmp_path)
    rule = kb.rule("cov-test-rule")

    assert version_tests(rule) == [("version_in", ">=0.25.0,<0.26.0")]
    assert covers(version_tests(rule), "0.25.1") and not covers(version_tests(rule), "0.26.0")
    rows = {release: count for release, count, _ in coverage(kb, tmp_path).releases}
    assert rows["0.25.1"] == 1 and rows["0.24.0"] == 0


def test_a_rule_names_its_families_or_they_are_read_from_its_text(tmp_path):
    kb = _load(tmp_path, "    families: [qwen3, qwen3-moe]")

    assert rule_families(kb.rule("cov-test-rule")) == ["qwen3", "qwen3-moe"]
    builtin = load_rules([BUILTIN_RULES_DIR])
    assert "gemma4" in rule_families(builtin.rule("up-gemma4-mtp-stable-release-cannot-load"))
    assert ANY_MODEL in dict(coverage(builtin, tmp_path).families)


def test_a_malformed_families_field_refuses_to_load(tmp_path):
    with pytest.raises(RuleError, match="families"):
        _load(tmp_path, "    families: Qwen 3")
