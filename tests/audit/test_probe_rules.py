"""Live-probe results turn an advisory into "confirmed on this server" (severity
up) or "not reproduced" (severity down, still listed), and an upgrade re-arms them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from audit.kb.context import build_contexts
from audit.kb.engine import load_rules

sys.path.insert(0, str(Path(__file__).parent))
from casekit import seed_report  # noqa: E402

KB = load_rules()
RULE = "gemma4-forced-tool-choice-unenforced"


def _finding(probes: list[dict] | None, version_at_probe: str = "0.25.1"):
    report = seed_report("LIGHT")
    server = report["servers"][0]
    server["vllm_version"] = "0.25.1"
    for result in probes or []:
        result.setdefault("vllm_version", version_at_probe)
    server["probes"] = probes or []
    (ctx,) = build_contexts(report, [])
    return {f.rule_id: f for f in KB.evaluate(ctx)}.get(RULE)


def _probe(outcome: str) -> dict:
    return {"name": "forced_tool_choice", "ran_at": "2026-12-01T08:00:00+00:00",
            "outcome": outcome, "duration_ms": 40,
            "evidence": "named: no tool_calls (finish_reason 'tool_calls'), content 'I would'"}


def test_unprobed_advisory_keeps_its_severity():
    finding = _finding(None)
    assert finding.severity == "low"
    assert "live probe" not in finding.message


def test_confirmed_probe_raises_severity_and_says_confirmed():
    finding = _finding([_probe("confirmed")])
    assert finding.severity == "medium"
    assert "Confirmed on this server by a live probe (2026-12-01)" in finding.message
    assert "no tool_calls" in finding.message


def test_not_reproduced_lowers_severity_but_stays_listed():
    finding = _finding([_probe("not_reproduced")])
    assert finding.severity == "info"
    assert "Not reproduced on this server by a live probe (2026-12-01)" in finding.message


@pytest.mark.parametrize("outcome", ["confirmed", "not_reproduced"])
def test_an_upgrade_rearms_the_advisory(outcome):
    finding = _finding([_probe(outcome)], version_at_probe="0.24.0")
    assert finding.severity == "low"
    assert "live probe" not in finding.message


def test_probe_errors_change_nothing():
    assert _finding([_probe("error")]).severity == "low"
