"""The fourth blind set (tests/audit/blind_cases_4/*.json) stays usable: every case file is
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
import test_blind_cases_3 as set3  # noqa: E402

SET4 = Path(__file__).resolve().parent / "blind_cases_4"
CASES = sorted(SET4.glob("*.json"))
SET1 = sorted((Path(__file__).resolve().parent / "blind_cases").glob("*.json"))


def _source(case: dict) -> str | None:
    """Set 1 names its report in ``source_url`` only; sets 2-4 in ``source`` too."""
    return case.get("source") or case.get("source_url")


def test_set_is_complete():
    """30 reports numbered 601-630, each a distinct vLLM tracker issue that none of the earlier
    sets uses, with the README that records how they were collected and measured."""
    assert len(CASES) == 30, f"{len(CASES)} cases in {SET4}"
    ids = [casekit.case_id(p) for p in CASES]
    assert ids == [str(n) for n in range(601, 631)], ids
    sources = [set2._load(p)["source"] for p in CASES]
    assert len(set(sources)) == len(sources), "two cases cite the same report"
    earlier = {_source(set2._load(p)) for p in [*SET1, *set2.CASES, *set3.CASES]}
    assert not earlier & set(sources), "a case of sets 1-3 is reused"
    assert (SET4 / "README.md").is_file()


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem[:3])
def test_case_fields(path: Path):
    """The facts and the expectation written before measuring are all there (set 3's check,
    which includes set 2's); a case whose cause is not established says so."""
    set3.test_case_fields(path)


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem[:3])
def test_case_builds_a_valid_report(path: Path):
    """casekit turns the case into a contract report the dashboard's own check accepts (set
    2's check)."""
    set2.test_case_builds_a_valid_report(path)


def test_measure_script_reads_set_4(capsys):
    """`blind_measure.py --set 4 601` prints the block of case 601 and nothing else."""
    blind_measure.main(["--set", "4", "601"])
    out = capsys.readouterr().out
    assert out.startswith("== 601-") and "\n== " not in out.strip("\n")[1:]
    assert "kind=" in out and "cause:" in out
