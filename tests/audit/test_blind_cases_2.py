"""The second blind set (tests/audit/blind_cases_2/*.json) stays usable: every case file is
well formed and turns into a report the dashboard accepts, through the same casekit path the
measurement uses. Deliberately no assertion on what the knowledge base finds: the set measures
the judgement (README there), it must not pin it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from fleet_agent.schema import parse_report

sys.path.insert(0, str(Path(__file__).resolve().parent))
import blind_measure  # noqa: E402
import casekit  # noqa: E402

SET2 = Path(__file__).resolve().parent / "blind_cases_2"
CASES = sorted(SET2.glob("*.json"))
# The tally kinds of the README (the misses are counted by these).
KINDS = {"unknown flag", "invalid choice", "backend capability", "quantization capability",
         "architecture unsupported", "parser mismatch", "regression fixed later",
         "live metrics", "memory", "other", "near miss"}
ISSUE_URL = "https://github.com/vllm-project/vllm/issues/"


def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def test_set_is_complete():
    """At least 28 reports, numbered 401+, each a distinct vLLM tracker issue, with the
    README that records how they were collected and measured."""
    assert len(CASES) >= 28, f"only {len(CASES)} cases in {SET2}"
    ids = [casekit.case_id(p) for p in CASES]
    assert len(set(ids)) == len(ids) and all(int(i) >= 401 for i in ids), ids
    sources = [_load(p)["source"] for p in CASES]
    assert len(set(sources)) == len(sources), "two cases cite the same report"
    assert (SET2 / "README.md").is_file()


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem[:3])
def test_case_fields(path: Path):
    """The facts and the expectation written before measuring are all there."""
    case = _load(path)
    assert case["source"].startswith(ISSUE_URL), case["source"]
    assert case["source"] == case["source_url"]
    for key in ("title", "vllm_version", "symptom", "root_cause", "expected_cause",
                "expected_finding", "confidence"):
        assert isinstance(case.get(key), str) and case[key].strip(), f"{key} missing"
    assert case["kind"] in KINDS, case["kind"]
    for key in ("startup_failure", "near_miss", "cause_established"):
        assert isinstance(case[key], bool), f"{key} must be true/false"
    assert isinstance(case["argv"], list) and all(isinstance(t, str) for t in case["argv"])
    assert isinstance(case["gpus"], list) and isinstance(case["env"], dict)
    assert all(isinstance(line, str) and line for line in case.get("error_lines", []))


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem[:3])
def test_case_builds_a_valid_report(path: Path):
    """casekit turns the case into a contract report the dashboard's own check accepts; a
    quoted start-up error becomes the failed start the log signatures are matched against."""
    case = _load(path)
    report = casekit.case_to_report(path, include_bench=True)
    parsed = parse_report(report)
    assert len(parsed.servers) == 1
    assert len(parsed.gpus) == sum(int(g.get("count") or 1) for g in case["gpus"])
    if case.get("error_lines"):
        assert report["failed_starts"][0]["lines"] == case["error_lines"]
    else:
        assert not report.get("failed_starts")


def test_measure_script_reads_set_2(capsys):
    """`blind_measure.py --set 2 401` prints the block of case 401 and nothing of set 1."""
    blind_measure.main(["--set", "2", "401"])
    out = capsys.readouterr().out
    assert out.startswith("== 401-") and "\n== " not in out.strip("\n")[1:]
    assert "kind=" in out and "cause:" in out


def test_measure_script_refuses_an_unknown_set():
    with pytest.raises(SystemExit, match="unknown set"):
        blind_measure.main(["--set", "99"])
