"""Models of the audit app: findings and their lifecycle (``findings``). Alert channels
and deliveries are the alerts app's (``alerts.models``)."""

from audit.models.findings import (
    SEVERITY_ORDER,
    Finding,
    FindingEvent,
    KnowledgeBaseVersion,
    Rule,
    RuleFailure,
    ServerAuditState,
    Severity,
)

__all__ = [
    "SEVERITY_ORDER", "Finding", "FindingEvent", "KnowledgeBaseVersion", "Rule",
    "RuleFailure", "ServerAuditState", "Severity",
]

from audit.models.kb import KnowledgeBaseInstall, UpstreamReference  # noqa: E402

__all__ += ["KnowledgeBaseInstall", "UpstreamReference"]
