"""Print what the knowledge base says about each blind case (tests/audit/blind_cases/*.json).

Usage: ``.venv/bin/python tests/audit/blind_measure.py [CASE_PREFIX ...]``

For every case: the rules that fire at low severity or above (severity, id), the rules whose
log signatures match the case's quoted error line (``error_lines``), and the case's expected
finding, so a reader can judge by hand whether the root cause was found (the README table).
Info findings are left out: they tell an operator nothing to act on.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))

import casekit  # noqa: E402

from audit.kb.engine import SEVERITY_RANK, load_rules  # noqa: E402

BLIND = HERE / "blind_cases"


def describe(kb, path: Path) -> str:
    """One case's block of text."""
    case = json.loads(path.read_text(encoding="utf-8"))
    fired, failures = casekit.evaluate_case(kb, path)
    shown = sorted(((f.severity, rid) for rid, f in fired.items()
                    if SEVERITY_RANK[f.severity] <= SEVERITY_RANK["low"]),
                   key=lambda t: (SEVERITY_RANK[t[0]], t[1]))
    logs = casekit.log_matches(kb, path)
    lines = [f"== {path.stem}", f"   expected: {case.get('expected_finding')}"]
    lines += [f"   {sev:8} {rid}" for sev, rid in shown] or ["   (no finding at low or above)"]
    lines += [f"   log      {rid}" for rid in sorted(logs)]
    lines += [f"   FAILED   {f.rule_id}: {f.error}" for f in failures]
    return "\n".join(lines)


def main(prefixes: list[str]) -> None:
    kb = load_rules()
    for path in sorted(BLIND.glob("*.json")):
        if not prefixes or path.name.split("-", 1)[0] in prefixes:
            print(describe(kb, path))


if __name__ == "__main__":
    main(sys.argv[1:])
