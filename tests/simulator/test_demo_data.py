"""The repository carries its own demo and test data, and a missing piece fails loudly.

A fresh clone with nothing beside it must play the demo and run the tests:
the case reports and ``/metrics`` captures live in ``demo/data/``; an absent folder raises
instead of yielding an empty list; and ``make demo`` says on the terminal when the replayed
fleet dies (``demo/run_sim.sh``).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from demo import paths

REPO = Path(__file__).resolve().parents[2]


def test_case_reports_and_captures_are_in_the_repository() -> None:
    reports, captures = paths.report_paths(), paths.capture_paths()
    assert len(reports) >= 28 and len(captures) >= 9
    assert all(REPO in p.parents for p in reports + captures)
    assert {"source_url", "argv", "expected_finding"} <= json.loads(reports[0].read_text()).keys()


def test_a_missing_data_folder_raises_with_the_path(monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    monkeypatch.setattr(paths, "CASES_DIR", tmp_path / "cases")
    with pytest.raises(FileNotFoundError, match="cases/reports is missing"):
        paths.report_paths()
    (tmp_path / "cases" / "metrics").mkdir(parents=True)  # present but empty is still missing
    with pytest.raises(FileNotFoundError, match="no \\*.prom files"):
        paths.capture_paths()


def test_no_tracked_file_points_outside_the_repository() -> None:
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout.split()
    offenders = []
    for name in tracked:
        path = REPO / name
        if path.suffix not in {".py", ".md", ".yaml", ".yml", ".toml", ".sh", ".txt", ""} \
                or not path.is_file() or name.startswith("demo/data/"):
            continue
        text = path.read_text(errors="replace")
        for needle in ("../" + "shared", "/" + "work/"):  # split so this file is no offender
            if needle in text:
                offenders.append(f"{name}: {needle}")
    assert offenders == []


def test_the_demo_says_on_the_terminal_when_the_fleet_dies(tmp_path: Path) -> None:
    script = REPO / "demo" / "run_sim.sh"
    log = tmp_path / "simulator.log"
    run = subprocess.run([str(script), "sh", "-c", "echo 'FileNotFoundError: gone'; exit 3"],
                         env={"SIM_LOG": str(log), "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, timeout=30)
    assert run.returncode == 3
    assert "replayed fleet DIED (exit 3)" in run.stderr
    assert "FileNotFoundError: gone" in run.stderr          # the log's tail, on the terminal
    assert "FileNotFoundError: gone" in log.read_text()      # and still in the log
