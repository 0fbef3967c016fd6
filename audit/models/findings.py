"""Findings and their lifecycle, the rule mirror, and the finding-event outbox.

Rules themselves are data (``audit/rules/*.yaml``, loaded by :mod:`audit.kb.engine`);
:class:`Rule` only mirrors them for the admin and the knowledge-base pages.
A :class:`Finding` is one rule firing on one server; at most one *active*
(not resolved) finding exists per (server, rule), so re-evaluation updates it
instead of duplicating it. :class:`FindingEvent` rows are both the finding
history shown on pages and the outbox the alerts consume.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

SEVERITY_ORDER = {"critical": 4, "high": 3, "medium": 2, "low": 1, "info": 0}


class Severity(models.TextChoices):
    CRITICAL = "critical", "critical"
    HIGH = "high", "high"
    MEDIUM = "medium", "medium"
    LOW = "low", "low"
    INFO = "info", "info"


class KnowledgeBaseVersion(models.Model):
    """One loaded version of the rule files (``version`` = sha256 of their content)."""

    version = models.CharField(max_length=64, unique=True)
    loaded_at = models.DateTimeField(default=timezone.now)
    rule_count = models.PositiveIntegerField(default=0)
    verified_through = models.CharField(max_length=32, blank=True)
    #: Set once every host's latest report was queued for re-evaluation under this version.
    fleet_requeued_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-loaded_at"]
        get_latest_by = "loaded_at"

    def __str__(self) -> str:
        return self.version[:12]


class Rule(models.Model):
    """Read-only mirror of one rule of the knowledge base (for the admin and KB pages)."""

    rule_id = models.SlugField(max_length=120, unique=True)
    title = models.CharField(max_length=300)
    kind = models.CharField(max_length=32)
    severity = models.CharField(max_length=16, choices=Severity.choices)
    cadence = models.CharField(max_length=16, default="config")
    remediation = models.TextField(blank=True)
    references = models.JSONField(default=list, blank=True)
    last_verified = models.DateField(null=True, blank=True)
    fixed_in = models.CharField(max_length=64, blank=True)
    confirmed_upstream = models.BooleanField(null=True)
    checklist = models.JSONField(default=list, blank=True)
    source_file = models.CharField(max_length=200, blank=True)
    definition = models.JSONField(default=dict, blank=True)
    kb_version = models.CharField(max_length=64, blank=True)
    active = models.BooleanField(default=True)

    class Meta:
        ordering = ["rule_id"]

    def __str__(self) -> str:
        return self.rule_id


class FindingQuerySet(models.QuerySet):
    def active(self) -> FindingQuerySet:
        """Findings still firing (open, acknowledged or silenced)."""
        return self.exclude(status=Finding.Status.RESOLVED)

    def alerting(self, now: datetime | None = None) -> FindingQuerySet:
        """Active findings nobody has acknowledged or silenced (a lapsed silence counts)."""
        now = now or timezone.now()
        return self.active().filter(
            models.Q(status=Finding.Status.OPEN)
            | models.Q(status=Finding.Status.SILENCED, silenced_until__lte=now))


class Finding(models.Model):
    """One rule firing on one server, with the evidence that made it fire."""

    class Status(models.TextChoices):
        OPEN = "open", "open"
        ACKNOWLEDGED = "acknowledged", "acknowledged"
        SILENCED = "silenced", "silenced"
        RESOLVED = "resolved", "resolved"

    code = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    host = models.ForeignKey("fleet.Host", on_delete=models.CASCADE, related_name="findings")
    server = models.ForeignKey("fleet.Server", on_delete=models.CASCADE,
                               related_name="findings")
    rule_id = models.SlugField(max_length=120, db_index=True)
    kind = models.CharField(max_length=32)
    severity = models.CharField(max_length=16, choices=Severity.choices, db_index=True)
    title = models.CharField(max_length=300)
    message = models.TextField()
    remediation = models.TextField(blank=True)
    references = models.JSONField(default=list, blank=True)
    evidence = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN,
                              db_index=True)
    first_seen = models.DateTimeField(default=timezone.now)
    last_seen = models.DateTimeField(default=timezone.now)
    resolved_at = models.DateTimeField(null=True, blank=True)
    last_report = models.ForeignKey("fleet.Report", null=True, blank=True,
                                    on_delete=models.SET_NULL, related_name="+")
    kb_version = models.CharField(max_length=64, blank=True)
    acknowledged_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                        on_delete=models.SET_NULL, related_name="+")
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    ack_note = models.TextField(blank=True)
    silenced_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                    on_delete=models.SET_NULL, related_name="+")
    silenced_until = models.DateTimeField(null=True, blank=True)
    silence_reason = models.TextField(blank=True)

    objects = FindingQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["server", "rule_id"],
                                    condition=~models.Q(status="resolved"),
                                    name="one_active_finding_per_server_rule"),
        ]
        # (host, status, severity): the overview's worst open finding per host.
        indexes = [models.Index(fields=["status", "severity"]),
                   models.Index(fields=["host", "status", "severity"])]
        ordering = ["-last_seen"]

    def __str__(self) -> str:
        return f"{self.rule_id} on {self.server}"

    @property
    def severity_rank(self) -> int:
        """4 for critical down to 0 for info, for sorting."""
        return SEVERITY_ORDER.get(self.severity, 0)

    def is_silenced(self, now: datetime | None = None) -> bool:
        """True while a silence is in force (a lapsed silence no longer counts)."""
        return (self.status == self.Status.SILENCED and self.silenced_until is not None
                and self.silenced_until > (now or timezone.now()))

    def acknowledge(self, user: Any, note: str = "") -> FindingEvent:
        """Acknowledge with ``note``; recorded with the user. Raises ValueError if resolved."""
        self._require_active()
        self.status = self.Status.ACKNOWLEDGED
        self.acknowledged_by, self.acknowledged_at, self.ack_note = user, timezone.now(), note
        self.save(update_fields=["status", "acknowledged_by", "acknowledged_at", "ack_note"])
        return self.record(FindingEvent.Kind.ACKNOWLEDGED, user=user, note=note)

    def silence(self, user: Any, until: datetime, reason: str) -> FindingEvent:
        """Silence until ``until`` (aware datetime) with a mandatory ``reason``.

        Raises ValueError when resolved, when ``until`` is in the past or the reason is empty.
        """
        self._require_active()
        if until <= timezone.now():
            raise ValueError("silence end must be in the future")
        if not reason.strip():
            raise ValueError("a silence needs a reason")
        self.status = self.Status.SILENCED
        self.silenced_by, self.silenced_until, self.silence_reason = user, until, reason
        self.save(update_fields=["status", "silenced_by", "silenced_until", "silence_reason"])
        return self.record(FindingEvent.Kind.SILENCED, user=user, note=reason,
                           payload={"until": until.isoformat()})

    def resolve(self, at: datetime) -> FindingEvent:
        """The rule stopped firing: resolve. A later firing opens a new finding."""
        self.status, self.resolved_at = self.Status.RESOLVED, at
        self.save(update_fields=["status", "resolved_at"])
        return self.record(FindingEvent.Kind.RESOLVED, at=at)

    def record(self, kind: str, *, at: datetime | None = None, user: Any = None,
               note: str = "", payload: dict | None = None, initial: bool = False
               ) -> FindingEvent:
        """Append an event to this finding's history (and the alerts outbox)."""
        return FindingEvent.objects.create(
            kind=kind, finding=self, host_id=self.host_id, server_id=self.server_id,
            rule_id=self.rule_id, severity=self.severity, at=at or timezone.now(),
            user=user, note=note, payload=payload or {}, initial=initial)

    def _require_active(self) -> None:
        if self.status == self.Status.RESOLVED:
            raise ValueError("finding is resolved")


class FindingEvent(models.Model):
    """Something alert-worthy happened: a finding opened/resolved/escalated, or a server
    changed version, got a pending upgrade, or restarted without a config change.

    ``dispatched_at`` is the outbox claim used by the alerts; ``initial`` marks events
    from a host's first report (alerts skip those unless a channel asks for them).
    """

    class Kind(models.TextChoices):
        OPENED = "opened", "opened"
        RESOLVED = "resolved", "resolved"
        SEVERITY_CHANGED = "severity_changed", "severity changed"
        ACKNOWLEDGED = "acknowledged", "acknowledged"
        SILENCED = "silenced", "silenced"
        VERSION_CHANGED = "version_changed", "vLLM version changed"
        PENDING_UPGRADE = "pending_upgrade", "pending upgrade appeared"
        RESTARTED_WITHOUT_CHANGE = "restarted_without_change", "restarted without a change"

    kind = models.CharField(max_length=32, choices=Kind.choices, db_index=True)
    finding = models.ForeignKey(Finding, null=True, blank=True, on_delete=models.CASCADE,
                                related_name="events")
    host = models.ForeignKey("fleet.Host", on_delete=models.CASCADE,
                             related_name="finding_events")
    server = models.ForeignKey("fleet.Server", null=True, blank=True,
                               on_delete=models.CASCADE, related_name="finding_events")
    rule_id = models.CharField(max_length=120, blank=True)
    severity = models.CharField(max_length=16, blank=True)
    at = models.DateTimeField(default=timezone.now, db_index=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                             on_delete=models.SET_NULL, related_name="+")
    note = models.TextField(blank=True)
    payload = models.JSONField(default=dict, blank=True)
    initial = models.BooleanField(default=False)
    dispatched_at = models.DateTimeField(null=True, blank=True, db_index=True)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.kind} {self.rule_id or ''} @ {self.at:%Y-%m-%d %H:%M}"


class RuleFailure(models.Model):
    """A rule that raised while evaluating a server (recorded; other rules still ran)."""

    server = models.ForeignKey("fleet.Server", on_delete=models.CASCADE,
                               related_name="rule_failures")
    report = models.ForeignKey("fleet.Report", null=True, blank=True,
                               on_delete=models.SET_NULL, related_name="+")
    rule_id = models.CharField(max_length=120)
    error = models.TextField()
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-at"]

    def __str__(self) -> str:
        return f"{self.rule_id}: {self.error[:60]}"


class ServerAuditState(models.Model):
    """What was last evaluated for a server, so work is skipped when nothing changed.

    Config rules run when ``config_fingerprint`` (version, installed version, argv, env,
    template, GPUs, knowledge-base version) changes; metric rules when
    ``metrics_evaluated_at`` is older than ``AUDIT_METRICS_INTERVAL_S``.
    """

    server = models.OneToOneField("fleet.Server", on_delete=models.CASCADE,
                                  related_name="audit_state")
    config_fingerprint = models.CharField(max_length=64, blank=True)
    config_evaluated_at = models.DateTimeField(null=True, blank=True)
    metrics_evaluated_at = models.DateTimeField(null=True, blank=True)
    #: The report whose /metrics was the start of the current metric window.
    metrics_baseline = models.ForeignKey("fleet.Report", null=True, blank=True,
                                         on_delete=models.SET_NULL, related_name="+")

    def __str__(self) -> str:
        return f"audit state of {self.server_id}"
