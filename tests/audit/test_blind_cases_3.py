"""The third blind set (tests/audit/blind_cases_3/*.json) stays usable: every case file is
well formed and turns into a report the dashboard accepts, through the same casekit path the
measurement uses. The per-case checks are set 2's (imported, not copied). Deliberately no
assertion on what the knowledge base finds: the set measures the judgement (README there), it
must not pin it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import blind_measure  # noqa: E402
import casekit  # noqa: E402
import test_blind_cases_2 as set2  # noqa: E402

SET3 = Path(__file__).resolve().parent / "blind_cases_3"
CASES = sorted(SET3.glob("*.json"))


def test_set_is_complete():
    """30 reports numbered 501-530, each a distinct vLLM tracker issue none of the earlier
    sets uses, with the README that records how they were collected and measured."""
    assert len(CASES) == 30, f"{len(CASES)} cases in {SET3}"
    ids = [casekit.case_id(p) for p in CASES]
    assert ids == [str(n) for n in range(501, 531)], ids
    sources = [set2._load(p)["source"] for p in CASES]
    assert len(set(sources)) == len(sources), "two cases cite the same report"
    earlier = {set2._load(p)["source"] for p in set2.CASES}
    assert not earlier & set(sources), "a case of set 2 is reused"
    assert (SET3 / "README.md").is_file()


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem[:3])
def test_case_fields(path: Path):
    """The facts and the expectation written before measuring are all there (set 2's check);
    a case whose cause is not established says so in its expectation."""
    set2.test_case_fields(path)
    case = set2._load(path)
    if not case["cause_established"]:
        assert case["expected_finding"] == "(not scored)", path.name
    if case["near_miss"]:
        assert case["kind"] == "near miss", path.name


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem[:3])
def test_case_builds_a_valid_report(path: Path):
    """casekit turns the case into a contract report the dashboard's own check accepts (set
    2's check)."""
    set2.test_case_builds_a_valid_report(path)


def test_measure_script_reads_set_3(capsys):
    """`blind_measure.py --set 3 501` prints the block of case 501 and nothing else."""
    blind_measure.main(["--set", "3", "501"])
    out = capsys.readouterr().out
    assert out.startswith("== 501-") and "\n== " not in out.strip("\n")[1:]
    assert "kind=" in out and "cause:" in out
