"""Rules mined from the vLLM tracker (``upx-`` prefix): each fires on the
real report it came from (tests/audit/more_cases/2NN-*.json, checked with the other more-cases
in test_more_cases.py) and stays silent on that report's nearest neighbour (mined_cases.py
``NEAR_MISSES``: the fixed release, another GPU, the other backend or flag).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from audit.kb.engine import load_rules

sys.path.insert(0, str(Path(__file__).resolve().parent))
import casekit  # noqa: E402
import mined_cases  # noqa: E402
from ctxfactory import make_context  # noqa: E402

MORE_CASES = Path(__file__).resolve().parent / "more_cases"


@pytest.fixture(scope="module")
def kb():
    """The whole knowledge base, as the product loads it."""
    return load_rules()


def _case_path(prefix: str) -> Path:
    found = sorted(MORE_CASES.glob(f"{prefix}-*.json"))
    assert len(found) == 1, f"case {prefix}: expected one file, found {found}"
    return found[0]


def _mutate(case: dict[str, Any], mutation: dict[str, Any]) -> dict[str, Any]:
    out = json.loads(json.dumps(case))
    for key in ("vllm_version", "gpus", "env", "nvidia_driver_version"):
        if key in mutation:
            out[key] = mutation[key]
    replace = mutation.get("argv_replace") or {}
    for old in replace:
        assert old in out["argv"], f"near miss replaces {old!r}, not in the case argv"
    argv = [replace.get(tok, tok) if tok in replace else tok for tok in out["argv"]]
    out["argv"] = [tok for tok in argv if tok is not None] + list(mutation.get("argv_add", []))
    for flag, value in (mutation.get("argv_set") or {}).items():
        assert flag in out["argv"], f"near miss sets {flag!r}, not in the case argv"
        out["argv"][out["argv"].index(flag) + 1] = value
    return out


NEAR = [(prefix, what, mutation) for prefix, items in mined_cases.NEAR_MISSES.items()
        for what, mutation in items]


def test_every_mined_case_has_a_file_and_at_least_one_near_miss():
    for prefix in mined_cases.EXPECTATIONS:
        _case_path(prefix)
        assert mined_cases.NEAR_MISSES[prefix], f"case {prefix} has no near miss"


@pytest.mark.parametrize(("prefix", "what", "mutation"), NEAR,
                         ids=[f"{p}-{w}" for p, w, _ in NEAR])
def test_the_mined_rule_stays_silent_on_the_near_miss_of_its_report(
        kb, tmp_path, prefix, what, mutation):
    path = _case_path(prefix)
    case = _mutate(json.loads(path.read_text(encoding="utf-8")), mutation)
    variant = tmp_path / path.name
    variant.write_text(json.dumps(case), encoding="utf-8")
    fired, failures = casekit.evaluate_case(kb, variant)
    assert not failures, failures
    expected, _ = mined_cases.EXPECTATIONS[prefix]
    loud = [rule_id for rule_id in expected if rule_id in fired]
    assert not loud, f"{path.name} ({what}): {loud} fired: {fired[loud[0]].message}"


def test_every_upx_rule_has_a_real_report_case_and_cites_upstream(kb):
    mined = [r for r in kb.rules if r.id.startswith("upx-")]
    covered = {rule_id for rules, _ in mined_cases.EXPECTATIONS.values() for rule_id in rules}
    assert len(mined) >= 1
    for rule in mined:
        assert rule.id in covered, f"{rule.id} has no real-report case"
        assert rule.confirmed_upstream is not None, rule.id
        assert any(ref.startswith("https://github.com/") for ref in rule.references), rule.id
        if rule.fixed_in is None:
            assert rule.confirmed_upstream is not None


def test_case_sources_are_cited_by_the_rule_they_test(kb):
    by_id = {r.id: r for r in kb.rules}
    for prefix, (rules, _) in mined_cases.EXPECTATIONS.items():
        source = json.loads(_case_path(prefix).read_text(encoding="utf-8"))["source_url"]
        cited = [rid for rid in rules if rid.startswith("upx-")
                 and source in by_id[rid].references]
        assert cited, f"case {prefix}: no expected upx- rule cites {source}"


@pytest.mark.parametrize("preset", ["light", "push", "plain"])
def test_the_seed_recipes_raise_no_mined_finding(kb, preset):
    loud = [(f.rule_id, f.severity) for f in kb.evaluate(make_context(preset))
            if f.rule_id.startswith("upx-")]
    assert loud == []
