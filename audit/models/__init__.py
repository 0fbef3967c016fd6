"""Models of the audit app: findings and their lifecycle (``findings``) and alert
channels and deliveries (``alerts``)."""

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

from audit.models.alerts import (  # noqa: E402
    AlertChannel,
    AlertThrottle,
    Delivery,
    DeliveryAttempt,
    Trigger,
)

__all__ += ["AlertChannel", "AlertThrottle", "Delivery", "DeliveryAttempt", "Trigger"]

from audit.models.kb import KnowledgeBaseInstall, UpstreamReference  # noqa: E402

__all__ += ["KnowledgeBaseInstall", "UpstreamReference"]
