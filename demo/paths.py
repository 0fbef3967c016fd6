"""Where the demo fleet's and the tests' real inputs live in the repository (``demo/data/``).

No Django, no server packages: the agent tests import this too. Every accessor raises
:class:`FileNotFoundError` naming the missing path when the data is absent or empty, so a
broken checkout fails loudly (a collection error) instead of yielding empty parameter sets.
See ``demo/data/README.md`` for where each file came from.
"""

from __future__ import annotations

from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent / "data"
CASES_DIR = DATA_DIR / "cases"
SEEDS_DIR = DATA_DIR / "seeds"


def _require(path: Path, pattern: str) -> Path:
    """``path`` if it holds at least one file matching ``pattern``; FileNotFoundError otherwise."""
    if not path.is_dir() or not any(path.glob(pattern)):
        raise FileNotFoundError(
            f"{path} is missing or holds no {pattern} files: the checkout is incomplete "
            "(demo/data/ is tracked in git; restore it with `git checkout -- demo/data`)")
    return path


def reports_dir() -> Path:
    """``demo/data/cases/reports``: one real public vLLM bug report per ``NNN-*.json``."""
    return _require(CASES_DIR / "reports", "*.json")


def metrics_dir() -> Path:
    """``demo/data/cases/metrics``: real ``/metrics`` captures (``*.prom``) and ``INDEX.md``."""
    return _require(CASES_DIR / "metrics", "*.prom")


def report_paths() -> list[Path]:
    """Every case report, sorted by name (never empty)."""
    return sorted(reports_dir().glob("*.json"))


def capture_paths() -> list[Path]:
    """Every ``/metrics`` capture, sorted by name (never empty)."""
    return sorted(metrics_dir().glob("*.prom"))


def seeds_dir() -> Path:
    """``demo/data/seeds``: the operating-point recipes the rules cite as ``seed:<file>``."""
    return _require(SEEDS_DIR, "*.txt")
