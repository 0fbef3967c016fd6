"""One --gpu-memory-utilization gives one finding (``supersedes``), and a rule
that supersedes a missing rule, or itself, is refused at load."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from audit.kb.engine import RuleError, load_rules
from audit.rulebook import current_knowledge_base

RULE = {"title": "t", "kind": "pitfall", "severity": "high", "cadence": "config",
        "condition": "true", "message": "m", "remediation": "r",
        "references": ["https://docs.vllm.ai/"], "last_verified": "2026-12-01"}


def _kb(tmp_path: Path, rules: list[dict]) -> Path:
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"rules": rules}))
    return path


def test_a_superseded_finding_is_dropped_when_both_fire(tmp_path: Path) -> None:
    kb = load_rules([_kb(tmp_path, [{**RULE, "id": "a-measured", "supersedes": ["b-advice"]},
                                    {**RULE, "id": "b-advice"}, {**RULE, "id": "c-other"}])])
    fired = sorted(f.rule_id for f in kb.evaluate({}))
    assert fired == ["a-measured", "c-other"]


@pytest.mark.parametrize("supersedes", [["nope"], ["a-self"], "b-advice"])
def test_supersedes_must_name_other_existing_rules(tmp_path: Path, supersedes) -> None:
    path = _kb(tmp_path, [{**RULE, "id": "a-self", "supersedes": supersedes},
                          {**RULE, "id": "b-advice"}])
    with pytest.raises(RuleError, match="supersedes"):
        load_rules([path.parent])  # a whole knowledge base (a folder) resolves every id


def test_the_shipped_kb_gives_one_finding_for_one_gpu_memory_utilization() -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "recommend"))
    from rkit import AWQ_31B, host_report, serve

    from audit.kb.context import build_context

    report = host_report("NVIDIA GeForce RTX 4090", 1, serve(
        AWQ_31B, "--gpu-memory-utilization", "0.97"), version="0.19.1")
    server = report["servers"][0]
    findings = current_knowledge_base().evaluate(build_context(server, report, None))
    ids = {f.rule_id for f in findings}
    assert "up-gpu-mem-util-no-cudagraph-headroom" in ids
    assert "gpu-memory-utilization-capture-cliff" not in ids
