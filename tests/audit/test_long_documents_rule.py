"""The seed's decision guide: documents past ~100K tokens need TP=2 for the 31B on H100."""

from __future__ import annotations

import sys
from pathlib import Path

from audit.kb.context import build_contexts
from audit.kb.engine import load_rules

sys.path.insert(0, str(Path(__file__).resolve().parent))
from casekit import seed_report  # noqa: E402

RULE = "gemma4-31b-tp1-long-documents"
KB = load_rules()


def _findings(report: dict) -> dict[str, str]:
    ctx = build_contexts(report, [])[0]
    return {f.rule_id: f.severity for f in KB.evaluate(ctx)}


def _with_max_model_len(report: dict, value: str) -> dict:
    argv = report["servers"][0]["argv"]
    argv[argv.index("--max-model-len") + 1] = value
    return report


def test_a_tp1_light_replica_stretched_to_long_documents_is_told_to_use_tp2():
    found = _findings(_with_max_model_len(seed_report("LIGHT"), "131072"))
    assert found.get(RULE) == "medium"


def test_the_light_recipe_itself_is_left_alone():
    assert RULE not in _findings(seed_report("LIGHT"))


def test_the_push_recipe_at_tp2_serves_262144_without_this_advice():
    assert RULE not in _findings(seed_report("PUSH"))
