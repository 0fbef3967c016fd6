"""What every blind set's own test checks of the set as a whole (sets 4 and later): 30 cases
numbered from ``first``, each citing a report no earlier set uses, a README, and the
measurement script reading the set. Per-case checks stay sets 2 and 3's."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import blind_measure  # noqa: E402
import casekit  # noqa: E402
import test_blind_cases_2 as set2  # noqa: E402

SET_SIZE = 30


def directory(number: int) -> Path:
    """``tests/audit/blind_cases`` for set 1, ``blind_cases_<n>`` after
    (:data:`blind_measure.SETS`; KeyError for a set that is not on disk)."""
    return blind_measure.SETS[str(number)]


def cases(number: int) -> list[Path]:
    """The case files of set ``number``, in case-number order."""
    return sorted(directory(number).glob("*.json"))


def source(case: dict) -> str | None:
    """Set 1 names its report in ``source_url`` only; later sets in ``source`` too."""
    return case.get("source") or case.get("source_url")


def assert_complete(number: int, first: int) -> None:
    """Set ``number`` holds cases ``first`` .. ``first + 29``, each a distinct report that no
    earlier set cites, and its README."""
    found = cases(number)
    assert len(found) == SET_SIZE, f"{len(found)} cases in {directory(number)}"
    ids = [casekit.case_id(p) for p in found]
    assert ids == [str(n) for n in range(first, first + SET_SIZE)], ids
    sources = [set2._load(p)["source"] for p in found]
    assert len(set(sources)) == len(sources), "two cases cite the same report"
    earlier = {source(set2._load(p)) for n in range(1, number) for p in cases(n)}
    assert not earlier & set(sources), f"a case of sets 1-{number - 1} is reused"
    assert (directory(number) / "README.md").is_file()


def assert_measure_reads(capsys, number: int, first: int) -> None:
    """``blind_measure.py --set <number> <first>`` prints that case's block and nothing else."""
    blind_measure.main(["--set", str(number), str(first)])
    out = capsys.readouterr().out
    assert out.startswith(f"== {first}-") and "\n== " not in out.strip("\n")[1:]
    assert "kind=" in out and "cause:" in out
