"""Offline evaluation of contract report files: the engine behind ``manage.py audit_snapshot``.

``evaluate_files(paths, history=False)`` reads agent reports (docs/wire-contract.md),
validates each with ``fleet_agent.schema.parse_report``, builds one context per server
(audit.kb.context.build_contexts), evaluates the knowledge base and returns::

    {"kb_version": "<sha256>", "reports": [{"file", "hostname", "gpu_count", "servers": [
        {"pid", "base_url", "findings": [{rule_id, severity, kind, title, message,
          remediation, references, evidence}], "failures": [{rule_id, error}]}]}]}

Findings are sorted by severity (critical first) then rule id. With ``history`` the files
are consecutive reports of one host, oldest first: each report is evaluated with the ones
before it as history (restarts, version changes, metric windows). No Django, no database,
no environment: ``python -m audit.kb.snapshot FILE...`` is the same entry point.
Exit codes of :func:`main`: 0 evaluated, 2 unreadable or invalid input, 1 invalid rules.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from audit.kb.context import build_contexts
from audit.kb.engine import KnowledgeBase, RuleError, load_rules
from fleet_agent.schema import ReportError, parse_report

FINDING_KEYS = ("rule_id", "severity", "kind", "title", "message", "remediation",
                "references", "evidence")


class InputError(ValueError):
    """A report file that cannot be read or is not a valid contract report."""


def read_report(path: str | Path) -> dict[str, Any]:
    """Load and validate one report file; raises :class:`InputError` with the reason."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not JSON: {exc}") from exc
    try:
        parse_report(data)
    except ReportError as exc:
        details = "; ".join(f"{d['path']}: {d['message']}" for d in exc.details)
        raise InputError(f"{path}: {exc}: {details}") from exc
    return data


def _server_result(ctx: dict[str, Any], server: dict[str, Any],
                   kb: KnowledgeBase) -> dict[str, Any]:
    evaluation = kb.evaluate(ctx)
    findings = [{key: getattr(f, key) for key in FINDING_KEYS} for f in evaluation]
    return {
        "pid": server.get("pid"), "base_url": server.get("base_url"), "findings": findings,
        "failures": [{"rule_id": f.rule_id, "error": f.error} for f in evaluation.failures],
    }


def evaluate_report(report: dict[str, Any], file: str, kb: KnowledgeBase,
                    history: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Evaluate every server of one validated report dict (``history`` oldest first)."""
    contexts = build_contexts(report, history or [])
    servers = report.get("servers") or []
    return {
        "file": file, "hostname": (report.get("host") or {}).get("hostname"),
        "gpu_count": len(report.get("gpus") or []),
        "servers": [_server_result(c, s, kb) for c, s in zip(contexts, servers, strict=True)],
        "failed_starts": [failed_start_result(entry, kb)
                          for entry in report.get("failed_starts") or []],
    }


def failed_start_result(entry: dict[str, Any], kb: KnowledgeBase) -> dict[str, Any]:
    """A failed start and the rules whose ``log_signatures`` match its lines."""
    return {"unit_or_container": entry.get("unit_or_container"), "source": entry.get("source"),
            "restart_count": entry.get("restart_count"),
            "matched": [{"rule_id": rule.id, "title": rule.title, "line": line,
                         "remediation": " ".join(rule.remediation.split())}
                        for rule, line in kb.match_log(entry.get("lines") or [])]}


def rules_source(rules: str | Path | None = None) -> list[Path] | None:
    """The rule folder the offline tools load: ``--rules DIR``, else ``AUDIT_RULES_DIR``.

    None means the shipped ``audit/rules/`` (what :func:`load_rules` loads by default), the
    same order of choice as the dashboard (``audit.rulebook.rules_dir``). Raises
    :class:`RuleError` when the chosen folder does not exist, rather than loading nothing.
    """
    chosen = rules or os.environ.get("AUDIT_RULES_DIR") or None
    if chosen is None:
        return None
    folder = Path(chosen)
    if not folder.is_dir():
        raise RuleError(folder, None, "rules folder not found (--rules / AUDIT_RULES_DIR)")
    return [folder]


def evaluate_files(paths: Sequence[str | Path], history: bool = False,
                   kb: KnowledgeBase | None = None,
                   rules: str | Path | None = None) -> dict[str, Any]:
    """Validate all ``paths`` first, then evaluate them (see module docstring).

    Rules: ``kb`` when given, else the folder of :func:`rules_source` (``rules``).
    Raises :class:`InputError` on the first unreadable or invalid file (nothing is
    evaluated then) and :class:`RuleError` when the rule files do not load.
    """
    reports = [read_report(path) for path in paths]
    kb = kb or load_rules(rules_source(rules))
    results = []
    for index, (path, report) in enumerate(zip(paths, reports, strict=True)):
        past = reports[:index] if history else None
        results.append(evaluate_report(report, str(path), kb, past))
    return {"kb_version": kb.version, "reports": results}


def no_server_line(report: dict[str, Any]) -> str:
    """What the text format says for a report without a vLLM server (rather than nothing)."""
    return (f"-- no vLLM server found in this report ({report.get('gpu_count', 0)} GPUs, "
            f"{len(report.get('failed_starts') or [])} failed starts)")


def render_text(result: dict[str, Any]) -> str:
    """Human-readable form of :func:`evaluate_files` output for support engineers."""
    lines = [f"knowledge base {result['kb_version'][:12]}"]
    for report in result["reports"]:
        lines.append(f"\n== {report['file']} (host {report['hostname']})")
        if not report["servers"]:
            lines.append(no_server_line(report))
        for server in report["servers"]:
            lines.append(f"-- server pid {server['pid']} at {server['base_url']}: "
                         f"{len(server['findings'])} finding(s)")
            for f in server["findings"]:
                lines.append(f"  [{f['severity'].upper()}] {f['rule_id']}: {f['title']}")
                lines.append(f"      {f['message']}")
                lines.append(f"      fix: {f['remediation']}")
            for failure in server["failures"]:
                lines.append(f"  [RULE FAILED] {failure['rule_id']}: {failure['error']}")
        for failed in report.get("failed_starts") or []:
            lines.append(f"-- failed start {failed['unit_or_container']} ({failed['source']}, "
                         f"{failed['restart_count']} restarts)")
            for m in failed["matched"] or [{"rule_id": "-", "title": "no rule matches",
                                            "line": "", "remediation": ""}]:
                lines.append(f"  [DOWN] {m['rule_id']}: {m['title']}")
                if m["line"]:
                    lines.append(f"      line: {m['line']}")
                    lines.append(f"      fix: {m['remediation']}")
    return "\n".join(lines) + "\n"


def run(paths: Sequence[str], fmt: str = "json", history: bool = False,
        out: TextIO = sys.stdout, err: TextIO = sys.stderr, rules: str | None = None) -> int:
    """Evaluate, print in ``fmt`` ("json" or "text") and return the exit code."""
    try:
        result = evaluate_files(paths, history=history, rules=rules)
    except InputError as exc:
        err.write(f"audit_snapshot: invalid input: {exc}\n")
        return 2
    except RuleError as exc:
        err.write(f"audit_snapshot: the knowledge base does not load: {exc}\n")
        return 1
    if fmt == "text":
        out.write(render_text(result))
    else:
        out.write(json.dumps(result, indent=2, sort_keys=False) + "\n")
    return 0


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """Arguments shared by ``python -m audit.kb.snapshot`` and ``manage.py audit_snapshot``."""
    parser = parser or argparse.ArgumentParser(
        prog="audit_snapshot", description="Evaluate agent report files offline.")
    parser.add_argument("files", nargs="+", metavar="FILE", help="contract report JSON files")
    parser.add_argument("--format", choices=("json", "text"), default="json")
    parser.add_argument("--history", action="store_true",
                        help="treat the files as consecutive reports of one host")
    add_rules_argument(parser)
    return parser


def add_rules_argument(parser: argparse.ArgumentParser) -> None:
    """``--rules DIR``: the rule folder to try (default ``AUDIT_RULES_DIR``, else audit/rules)."""
    parser.add_argument("--rules", metavar="DIR", default=None,
                        help="rule folder to load (default: $AUDIT_RULES_DIR, else the "
                             "shipped audit/rules/)")


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit code."""
    args = build_parser().parse_args(argv)
    return run(args.files, args.format, args.history, rules=args.rules)


if __name__ == "__main__":
    sys.exit(main())
