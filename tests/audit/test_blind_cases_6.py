"""The sixth blind set (tests/audit/blind_cases_6/*.json) stays usable: every case file is
well formed and turns into a report the dashboard accepts, through the same casekit path the
measurement uses. The per-case checks are sets 2 and 3's (imported, not copied). Deliberately
no assertion on what the knowledge base finds: the set measures the judgement (README there),
it must not pin it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import blindsets  # noqa: E402
import test_blind_cases_2 as set2  # noqa: E402
import test_blind_cases_3 as set3  # noqa: E402

CASES = blindsets.cases(6)


def test_set_is_complete():
    """30 reports numbered 801-830, each a distinct vLLM tracker issue that none of the earlier
    sets uses, with the README that records how they were collected and measured."""
    blindsets.assert_complete(6, 801)


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


def test_measure_script_reads_set_6(capsys):
    """`blind_measure.py --set 6 801` prints the block of case 801 and nothing else."""
    blindsets.assert_measure_reads(capsys, 6, 801)
