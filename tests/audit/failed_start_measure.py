"""Print how the repo's real failed-start lines are answered: by a rule's log signature
(what the product had before explanations) and by the explanation (setting and change).

Usage: ``.venv/bin/python tests/audit/failed_start_measure.py [-v]``

Lines: the public reports (tests/data/failed_start_lines.json, tests/audit/more_cases,
tests/audit/blind_cases) and the real vLLM 0.32.0 captures
(tests/data/real_vllm/0.32.0/failed_starts). ``-v`` prints one row per case.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from audit.kb.engine import load_rules  # noqa: E402
from audit.kb.failed_start_explain import explain  # noqa: E402
from tests.audit.test_failed_start_explain import (  # noqa: E402
    CAPTURED,
    capture_lines,
    public_cases,
)


def main(verbose: bool) -> None:
    kb = load_rules([HERE.parents[1] / "audit" / "rules"])
    groups = {"public reports": public_cases(), "real 0.32.0 captures": []}
    for path in CAPTURED:
        case = json.loads(path.read_text())
        groups["real 0.32.0 captures"].append(
            (path.name, *capture_lines(case)[:1], case["argv"], capture_lines(case)[1]))
    for name, cases in groups.items():
        rule = named = 0
        for source, lines, argv, version in cases:
            matched = kb.match_log(lines)
            found = explain(lines, argv, version)
            rule += bool(matched)
            named += found.names_setting_and_change
            if verbose:
                print(f"{source[-60:]:60} rules={[r.id for r, _ in matched]} {found.kind} "
                      f"{found.setting} -> {(found.change or '')[:80]}")
        print(f"{name}: {len(cases)} failed starts; a rule's signature matches {rule}; "
              f"the explanation names the setting and the change for {named}")


if __name__ == "__main__":
    main("-v" in sys.argv[1:])
