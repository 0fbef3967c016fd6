"""Blind sets 5-17 (tests/audit/blind_cases_<n>/*.json) stay usable: every case file is
well formed and turns into a report the dashboard accepts, through the same casekit path the
measurement uses. The per-case checks are sets 2 and 3's (imported, not copied). Deliberately
no assertion on what the knowledge base finds: a set measures the judgement (README there),
it must not pin it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import blindsets  # noqa: E402
import casekit  # noqa: E402
import test_blind_cases_2 as set2  # noqa: E402
import test_blind_cases_3 as set3  # noqa: E402

#: Set number -> its first case number (30 cases each).
FIRST = {5: 701, 6: 801, 7: 901, 8: 1001, 9: 1101, 10: 1201, 11: 1301, 12: 1401,
         13: 1501, 14: 1601, 15: 1701, 16: 1801, 17: 1901}
CASES = [pytest.param(path, id=casekit.case_id(path)) for number in FIRST
         for path in blindsets.cases(number)]


@pytest.mark.parametrize("number", FIRST)
def test_set_is_complete(number: int):
    """30 reports numbered from the set's first number, each a distinct vLLM tracker issue
    that none of the earlier sets uses, with the README that records how they were collected
    and measured."""
    blindsets.assert_complete(number, FIRST[number])


@pytest.mark.parametrize("path", CASES)
def test_case_fields(path: Path):
    """The facts and the expectation written before measuring are all there (set 3's check,
    which includes set 2's); a case whose cause is not established says so."""
    set3.test_case_fields(path)


@pytest.mark.parametrize("path", CASES)
def test_case_builds_a_valid_report(path: Path):
    """casekit turns the case into a contract report the dashboard's own check accepts (set
    2's check)."""
    set2.test_case_builds_a_valid_report(path)


@pytest.mark.parametrize("number", FIRST)
def test_measure_script_reads_the_set(capsys, number: int):
    """`blind_measure.py --set N <first>` prints the block of the set's first case and
    nothing else."""
    blindsets.assert_measure_reads(capsys, number, FIRST[number])
