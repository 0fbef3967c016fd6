"""Print what the knowledge base says about each blind case.

Usage::

    .venv/bin/python tests/audit/blind_measure.py [--set N | --dir PATH] [CASE_PREFIX ...]

``--set N`` reads ``tests/audit/blind_cases_N/`` (``--set 1``, the default, reads
``tests/audit/blind_cases/``); the known sets are the keys of :data:`SETS`;
``--dir`` names any directory of case files in the same format.

For every case: the rules that fire at low severity or above (severity, id), the rules whose
log signatures match the case's quoted error line (``error_lines``), and the case's expected
cause/finding, so a reader can judge by hand whether the root cause was found (the README
table). Info findings are left out: they tell an operator nothing to act on. Cases of the
second set also carry ``kind``, ``startup_failure``, ``near_miss`` and ``cause_established``,
written before any measurement; they are printed so the tally can be made from the output.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))

import casekit  # noqa: E402

from audit.kb.engine import SEVERITY_RANK, load_rules  # noqa: E402
from audit.kb.failed_start_explain import explain  # noqa: E402
from audit.kb.failed_start_facts import facts_of  # noqa: E402


def _sets() -> dict[str, Path]:
    """Set number (as typed after ``--set``) -> its directory: ``blind_cases`` is set 1,
    ``blind_cases_<n>`` set n. Read from the directories present, so a new set needs no edit
    here."""
    found = {"1": HERE / "blind_cases"}
    for path in HERE.glob("blind_cases_*"):
        number = path.name.rsplit("_", 1)[1]
        if path.is_dir() and number.isdigit():
            found[number] = path
    return found


SETS = _sets()
BLIND = SETS["1"]
_TAGS = ("kind", "startup_failure", "near_miss", "cause_established")


def describe(kb, path: Path) -> str:
    """One case's block of text."""
    case = json.loads(path.read_text(encoding="utf-8"))
    fired, failures = casekit.evaluate_case(kb, path)
    shown = sorted(((f.severity, rid) for rid, f in fired.items()
                    if SEVERITY_RANK[f.severity] <= SEVERITY_RANK["low"]),
                   key=lambda t: (SEVERITY_RANK[t[0]], t[1]))
    logs = casekit.log_matches(kb, path)
    lines = [f"== {path.stem}"]
    tags = [f"{key}={case[key]}" for key in _TAGS if key in case]
    if tags:
        lines.append("   " + " ".join(tags))
    if case.get("expected_cause"):
        lines.append(f"   cause:    {case['expected_cause']}")
    lines.append(f"   expected: {case.get('expected_finding')}")
    lines += [f"   {sev:8} {rid}" for sev, rid in shown] or ["   (no finding at low or above)"]
    lines += [f"   log      {rid}" for rid in sorted(logs)]
    lines += [f"   FAILED   {f.rule_id}: {f.error}" for f in failures]
    lines += explanations(path, bool(logs))
    return "\n".join(lines)


def explanations(path: Path, matched: bool) -> list[str]:
    """The failed-start explanation (audit/crashloop.py) of the case's quoted error lines:
    the ``failed-start`` finding itself (high) when no log signature matched, else carried in
    the signature finding's remediation ("For this start: ...") when it names a setting."""
    report = casekit.case_to_report(path)
    version = (report["servers"][0]["installed_vllm_version"] if report["servers"]
               else casekit.extract_version(json.loads(path.read_text())["vllm_version"]))
    out = []
    for failed in report.get("failed_starts") or []:
        # the report's host/GPU/model facts, as the dashboard passes them (audit/crashloop.py)
        found = explain(failed["lines"], failed["argv"], version,
                        facts=facts_of(report, failed))
        where = ("in remediation" if found.names_setting_and_change else "evidence only") \
            if matched else "high failed-start"
        out.append(f"   explain  [{where}] kind={found.kind} setting={found.setting} "
                   f"value={found.value!r} summary={found.summary!r}")
        out.append(f"            checked={found.checked!r} change={found.change!r}")
    return out


def case_dir(set_name: str | None, directory: str | None) -> Path:
    """The directory of case files to measure; a missing one is an error, never a skip."""
    if directory:
        path = Path(directory)
    else:
        if set_name not in SETS:
            raise SystemExit(f"unknown set {set_name!r}; known: {', '.join(sorted(SETS))}")
        path = SETS[set_name]
    if not path.is_dir():
        raise SystemExit(f"no case directory at {path}")
    return path


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", default="1", help="blind set number (1, 2, 3, 4 or 5; default 1)")
    parser.add_argument("--dir", help="a directory of case files (overrides --set)")
    parser.add_argument("prefixes", nargs="*", help="case number prefixes to measure")
    args = parser.parse_args(argv)
    kb = load_rules()
    for path in sorted(case_dir(args.set, args.dir).glob("*.json")):
        if not args.prefixes or path.name.split("-", 1)[0] in args.prefixes:
            print(describe(kb, path))


if __name__ == "__main__":
    main(sys.argv[1:])
