"""Writing one evaluation's results: the per-server outcome and the finding upsert.

Shared by :mod:`audit.evaluation` (rule conditions) and :mod:`audit.crashloop` (failed
starts), so neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from audit import rows
from audit.kb.engine import FindingResult
from audit.models import Finding, FindingEvent
from fleet.models import Report, Server


@dataclass
class ServerOutcome:
    """What one server's evaluation did (for logs and tests)."""

    server_id: int
    cadences: list[str]
    opened: list[str] = field(default_factory=list)
    resolved: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)



#: Finding fields that are strings (or lists of strings) fixed by the rule and the KB.
_TEXTS = frozenset({"kind", "title", "remediation", "references", "kb_version"})


def upsert_finding(server: Server, report: Report, result: FindingResult, finding: Finding | None,
                   kb_version: str, initial: bool, outcome: ServerOutcome) -> None:
    """Open ``result`` as a finding of ``server`` (event OPENED) or refresh the open
    ``finding`` in place (event SEVERITY_CHANGED when its severity moved); the outcome
    records what was opened."""
    at = report.collected_at
    fields = {"kind": result.kind, "title": result.title[:300], "message": result.message,
              "remediation": result.remediation, "references": list(result.references),
              "evidence": result.evidence, "last_seen": at, "last_report": report,
              "kb_version": kb_version}
    if finding is None:
        finding = Finding.objects.create(host_id=server.host_id, server=server,
                                         rule_id=result.rule_id, severity=result.severity,
                                         first_seen=at, **fields)
        finding.record(FindingEvent.Kind.OPENED, at=at, initial=initial,
                       payload={"message": result.message})
        outcome.opened.append(result.rule_id)
        return
    old_severity = finding.severity
    # The row as read, less what this result says alike: the fixed texts of a rule are
    # written only when they differ (plain strings, so equal means the same stored value).
    changed = [name for name in fields
               if name not in _TEXTS or getattr(finding, name) != fields[name]]
    for name, value in fields.items():
        setattr(finding, name, value)
    finding.severity = result.severity
    rows.save(finding, [*changed, "severity"])  # findings have no save receivers
    if old_severity != result.severity:
        finding.record(FindingEvent.Kind.SEVERITY_CHANGED, at=at,
                       payload={"old": old_severity, "new": result.severity})
