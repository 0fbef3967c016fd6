"""Log signatures in the knowledge base: the optional ``log_signatures`` rule field,
validated at load, and the real error lines of public vLLM reports each matched to its rule.

The lines and their source URLs are in tests/data/failed_start_lines.json (one test per line).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from audit.kb.engine import RuleError, load_rules

DATA = json.loads((Path(__file__).parents[1] / "data" / "failed_start_lines.json").read_text())
KB = load_rules()


def _rule(**changes: Any) -> dict[str, Any]:
    rule = {
        "id": "test-sig", "title": "Sig", "kind": "pitfall", "severity": "high",
        "cadence": "config", "condition": "false", "message": "m", "remediation": "r",
        "references": ["https://docs.vllm.ai/"], "last_verified": "2026-11-30",
    }
    rule.update(changes)
    return rule


def _load(tmp_path: Path, **changes: Any):
    path = tmp_path / "sig.yaml"
    path.write_text(yaml.safe_dump({"rules": [_rule(**changes)]}))
    return load_rules([path])


@pytest.mark.parametrize("row", DATA["lines"], ids=lambda r: f"{r['rule_id']}<-{r['url']}")
def test_real_error_line_fires_its_rule(row: dict[str, str]) -> None:
    """Each error line quoted in a public report matches the rule that explains it, and the
    matching line is returned as the evidence, even among unrelated start-up lines."""
    lines = ["INFO 11-30 10:00:01 [api_server.py:1] vLLM API server version 0.30.0",
             "Traceback (most recent call last):", row["line"]]
    matched = {rule.id: line for rule, line in KB.match_log(lines)}
    assert row["rule_id"] in matched, f"no signature of {row['rule_id']} matches {row['url']}"
    assert matched[row["rule_id"]] == row["line"]
    assert len(matched) <= 2, f"too broad: {sorted(matched)}"


def test_at_least_fifteen_cited_lines() -> None:
    assert len(DATA["lines"]) >= 15
    assert all(r["url"].startswith("https://github.com/") for r in DATA["lines"])


def test_healthy_start_up_matches_nothing() -> None:
    lines = ["INFO 11-30 10:00:01 [gpu_worker.py:1] Available KV cache memory: 20.5 GiB",
             "INFO Graph capturing finished in 12 secs, took 0.46 GiB",
             "WARNING Cannot use FlashAttention-2 backend for head size 72, using XFORMERS"]
    assert KB.match_log(lines) == []


def test_signature_field_loads_and_matches(tmp_path: Path) -> None:
    kb = _load(tmp_path, log_signatures=[r"widget \d+ exploded"])
    assert [(r.id, line) for r, line in kb.match_log(["a", "widget 42 exploded", "b"])] == [
        ("test-sig", "widget 42 exploded")]


@pytest.mark.parametrize(("value", "problem"), [
    ("just a string", "expected a list"),
    ([], "expected a list"),
    ([r"x"] * 11, "expected a list"),
    ([42], "non-empty string"),
    (["x" * 201], "longer than 200"),
    (["(unclosed"], "not a valid regular expression"),
    ([r"(a+)+$"], "catastrophic"),
    ([r"(.*)*x"], "catastrophic"),
    ([r"(x|y+){2,}"], "catastrophic"),
    ([r"(a)\1"], "backreferences"),
])
def test_bad_signatures_refused_at_load(tmp_path: Path, value: Any, problem: str) -> None:
    with pytest.raises(RuleError) as raised:
        _load(tmp_path, log_signatures=value)
    assert "test-sig" in str(raised.value) and "log_signatures" in str(raised.value)
    assert problem in str(raised.value)


def test_audit_snapshot_explains_a_failed_start_offline(tmp_path: Path) -> None:
    """A support engineer runs audit_snapshot on `fleet-agent collect --print` output of a
    node whose server does not come back: the text names the rule, the line and the fix."""
    from audit.kb import snapshot

    sample = sorted((Path(__file__).parents[2] / "fleet" / "fixtures").glob("*.json"))[0]
    report = json.loads(sample.read_text())
    row = DATA["lines"][0]
    report["failed_starts"] = [{"source": "docker", "unit_or_container": "vllm-qwen",
                                "argv": ["vllm", "serve", "m"], "restart_count": 9,
                                "lines": ["Traceback (most recent call last):", row["line"]]}]
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report))
    result = snapshot.evaluate_files([path], kb=KB)
    [failed] = result["reports"][0]["failed_starts"]
    assert [m["rule_id"] for m in failed["matched"]] == [row["rule_id"]]
    text = snapshot.render_text(result)
    assert f"[DOWN] {row['rule_id']}" in text and row["line"] in text and "fix: " in text
