"""Offline command-line front ends (no Django, no database): ``manage.py recommend`` and
``manage.py plan_upgrade`` are thin wrappers over :func:`run_recommend` / :func:`run_plan`.

Exit codes: 0 done; 2 invalid input (unreadable file, not a contract report, unknown
workload or target version), with the reason on stderr; 1 when the rule files do not load.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from advice import planner
from advice.recommend import cli_json, recommend_report
from advice.recommend.workload import PROFILES
from audit.kb.engine import RuleError, load_rules
from audit.kb.snapshot import InputError, add_rules_argument, read_report, rules_source
from audit.kb.sources import readable


def recommend_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """Arguments of ``recommend FILE [--workload …] [--format json|text]``."""
    parser = parser or argparse.ArgumentParser(prog="recommend")
    parser.add_argument("file", metavar="FILE", help="contract report JSON file")
    parser.add_argument("--workload", choices=PROFILES, default=None,
                        help="workload profile (default: inferred from live metrics)")
    parser.add_argument("--format", choices=("json", "text"), default="json")
    add_rules_argument(parser)
    return parser


def plan_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """Arguments of ``plan_upgrade FILE... --target VERSION [--format json|text]``."""
    parser = parser or argparse.ArgumentParser(prog="plan_upgrade")
    parser.add_argument("files", nargs="+", metavar="FILE", help="contract report JSON files")
    parser.add_argument("--target", required=True, action="append",
                        help="target vLLM version (repeat for a fleet comparison)")
    parser.add_argument("--model", default=None, help="only servers running this model")
    parser.add_argument("--format", choices=("json", "text"), default="json")
    add_rules_argument(parser)
    return parser


def run_recommend(path: str, workload: str | None, fmt: str, out: TextIO = sys.stdout,
                  err: TextIO = sys.stderr, rules: str | None = None) -> int:
    """Recommend for every server of one report file; returns the exit code.

    ``rules``: the rule folder (``--rules``; default ``AUDIT_RULES_DIR``, else audit/rules).
    """
    try:
        report = read_report(path)
        result = recommend_report(report, workload=workload, kb=load_rules(rules_source(rules)))
    except (InputError, ValueError) as exc:
        if isinstance(exc, RuleError):
            err.write(f"recommend: the knowledge base does not load: {exc}\n")
            return 1
        err.write(f"recommend: invalid input: {exc}\n")
        return 2
    out.write(render_text(result) if fmt == "text" else
              json.dumps(cli_json(result), indent=2) + "\n")
    return 0


def render_text(result: dict[str, Any]) -> str:
    """Human-readable recommendation: commands, diff, expected figures, notes."""
    lines: list[str] = []
    for item in result["servers"]:
        lines.append(f"server pid {item['pid']} ({item['base_url']}): {item['model']}")
        lines.append(f"  layout: {item['layout']}   vLLM: {item['version']['current']} -> "
                     f"{item['version']['recommended']}   workload: "
                     f"{item['workload']['profile']} ({item['workload']['source']})")
        for index, replica in enumerate(item["replicas"]):
            lines.append(f"  replica {index} on GPU {replica['gpus']}:")
            lines.append("    " + replica["command"])
            lines.append("    " + replica["docker_command"])
        for row in item["diff"]:
            lines.append(f"  {row['flag']}: {row['current']} -> {row['recommended']}")
            lines.append(f"      why: {row['reason']}")
            if row["references"]:
                lines.append(f"      refs: {'; '.join(map(readable, row['references']))}")
        for fig in item["expected"]:
            kind = "measured" if fig["measured"] else "extrapolated"
            lines.append(f"  expect {fig['figure']}: {fig['value']} {fig['unit']} ({kind}; "
                         f"{fig['conditions']}; {fig['source']})")
        prediction = item["prediction"]
        lines.append(f"  what it buys: {prediction.get('buys') or prediction['reason']}")
        lines += [f"  note: {note}" for note in item["notes"]]
    return "\n".join(lines) + "\n"


def run_plan(paths: Sequence[str], targets: list[str], model: str | None, fmt: str,
             out: TextIO = sys.stdout, err: TextIO = sys.stderr, rules: str | None = None) -> int:
    """Plan the upgrade of every server in the report files to each target (``rules`` as in
    :func:`run_recommend`)."""
    try:
        reports = [read_report(p) for p in paths]
        kb = load_rules(rules_source(rules))
        for target in targets:
            planner.normalise_target(target)
        plans = [p for r in reports for t in targets
                 for p in planner.plan_report(r, t, None, kb, model)]
        pending = [p for r in reports for p in planner.pending_upgrades(r, None, kb)]
        fleet = planner.plan_fleet([{**r, "servers": planner.select(r, model)}
                                    for r in reports], targets, kb)
    except RuleError as exc:
        err.write(f"plan_upgrade: the knowledge base does not load: {exc}\n")
        return 1
    except (InputError, ValueError) as exc:
        err.write(f"plan_upgrade: invalid input: {exc}\n")
        return 2
    summary = [{k: c[k] for k in ("target", "servers", "blocked", "risky", "safe", "breaks")}
               for c in fleet["candidates"]]
    result = {"plans": plans, "pending": pending, "fleet": summary}
    out.write(render_plan_text(result) if fmt == "text" else json.dumps(result, indent=2) + "\n")
    return 0


def render_plan_text(result: dict[str, Any]) -> str:
    """Human-readable upgrade plans."""
    lines = []
    for plan in result["plans"] + result["pending"]:
        lines.append(f"server pid {plan['pid']} ({plan['model']}): {plan['current']} -> "
                     f"{plan['target']} [{plan['label']}]: {plan['verdict'].upper()}")
        lines += [f"  reason: {r}" for r in plan["reasons"]]
        lines += [f"  upstream: {u}" for u in plan["upstream_issues"]]
        lines += [f"  + {f['severity']} {f['rule_id']}" for f in plan["appear"]]
        lines += [f"  ^ {f['was']}->{f['severity']} {f['rule_id']}" for f in plan["escalate"]]
        lines += [f"  - {f['severity']} {f['rule_id']}" for f in plan["disappear"]]
    for row in result["fleet"]:
        lines.append(f"fleet {row['target']}: {row['blocked']} blocked, {row['risky']} risky, "
                     f"{row['safe']} safe of {row['servers']}")
    return "\n".join(lines) + "\n"
