"""Alert channels, deliveries, throttles and the Alertmanager state.

- :class:`AlertChannel`: where alerts go (kind from :mod:`alerts.transports`), and
  which ones (triggers, minimum severity, host labels, first-report events).
- :class:`Delivery`: one message to one channel, carrying one or a group of
  finding events. Unique per (channel, group_key) and claimed with a conditional
  update before sending, so each is sent once; every attempt is a
  :class:`DeliveryAttempt` row with its response code, error and duration.
- :class:`AlertThrottle`: when a (channel, key) last alerted, so repeats of the
  same (host, rule) inside ``ALERT_THROTTLE_S`` are dropped.
- :class:`AlertmanagerAlert`: what an Alertmanager channel last posted per finding or
  host (``alerts.alertmanager_sync``), so a change of labels resolves the old label set.
"""

from __future__ import annotations

import secrets
import uuid
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from alerts.transports import Transport, get_transport, transport_choices
from audit.kb.labels import label
from audit.models.findings import SEVERITY_ORDER, FindingEvent, Severity


class Trigger(models.TextChoices):
    """Why an alert is sent (see ``alerts.alerts.classify``)."""

    RISKY_UPGRADE = "risky_upgrade", "risky upgrade (running or pending)"
    NEW_FINDING = "new_finding", "new finding"
    RESOLVED = "resolved", "finding resolved"
    HOST_SILENT = "host_silent", "host stopped reporting"
    METRIC_ALARM = "metric_alarm", "live-metric alarm"
    KNOWLEDGE_BASE = "knowledge_base", "knowledge base needs attention (stale, upstream changed)"
    TEST = "test", "test message"


def default_triggers() -> list[str]:
    """A new channel hears about risky upgrades, new findings, silent hosts, alarms."""
    return [Trigger.RISKY_UPGRADE, Trigger.NEW_FINDING, Trigger.HOST_SILENT,
            Trigger.METRIC_ALARM, Trigger.KNOWLEDGE_BASE]


def new_secret() -> str:
    """A 256-bit URL-safe signing secret for webhook channels."""
    return secrets.token_urlsafe(32)


class AlertChannel(models.Model):
    """One destination for alerts, with the filters deciding what reaches it.

    ``destination``: email addresses (comma separated) or a webhook URL.
    ``host_labels``: ``{"env": "prod"}``; a host must carry every pair (empty = all).
    ``failing_since``/``failure_reason``: set by a permanent delivery failure; a
    failing channel receives no new alerts until it is edited or a test succeeds.
    """

    code = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    kind = models.CharField(max_length=32, choices=transport_choices)
    name = models.CharField(max_length=100)
    destination = models.TextField()
    secret = models.CharField(max_length=200, blank=True,
                              help_text="HMAC-SHA256 key for webhook signatures.")
    min_severity = models.CharField(max_length=16, choices=Severity.choices,
                                    default=Severity.HIGH)
    triggers = models.JSONField(default=default_triggers, blank=True)
    host_labels = models.JSONField(default=dict, blank=True)
    include_initial = models.BooleanField(
        default=False, help_text="Also alert on findings a host has at its first report.")
    enabled = models.BooleanField(default=True)
    # HTTP client options of Alertmanager channels (alerts.transports.alertmanager): one of
    # bearer or basic auth, and TLS (a CA bundle to trust, a client certificate and key).
    bearer_token = models.CharField(max_length=4000, blank=True)
    basic_username = models.CharField(max_length=200, blank=True)
    basic_password = models.CharField(max_length=400, blank=True)
    tls_ca = models.TextField(blank=True, help_text="PEM CA bundle trusted for https "
                              "(empty: the system's).")
    tls_client_cert = models.TextField(blank=True, help_text="PEM client certificate.")
    tls_client_key = models.TextField(blank=True, help_text="PEM private key of the "
                                      "client certificate (unencrypted).")
    failing_since = models.DateTimeField(null=True, blank=True)
    failure_reason = models.TextField(blank=True)
    #: Channels that mirror the state (Alertmanager): the end of the last sync that posted
    #: everything it had to, and the error that stopped the last one ("" when it completed).
    synced_at = models.DateTimeField(null=True, blank=True)
    sync_error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "audit_alertchannel"  # moved from the audit app; the table kept its name
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"

    def transport(self) -> Transport:
        """An instance of this channel's transport class (KeyError for an unknown kind)."""
        return get_transport(self.kind)(self)

    def clean(self) -> None:
        """Validate the destination with the transport; generate a missing secret."""
        try:
            cls = get_transport(self.kind)
        except KeyError as exc:
            raise ValidationError({"kind": str(exc)}) from None
        try:
            self.destination = cls.validate_destination(self.destination)
        except ValueError as exc:
            raise ValidationError({"destination": str(exc)}) from None
        unknown = set(self.triggers or []) - set(Trigger.values)
        if unknown:
            raise ValidationError({"triggers": f"unknown triggers: {sorted(unknown)}"})
        if cls.uses_secret and not self.secret:
            self.secret = new_secret()
        try:
            cls.validate_client_options(self)
        except ValueError as exc:
            raise ValidationError(str(exc)) from None

    @property
    def trigger_labels(self) -> list[str]:
        """The triggers this channel hears, in words ("Risky upgrade", ...)."""
        return [label(t) for t in self.triggers or []]

    @property
    def is_failing(self) -> bool:
        return self.failing_since is not None

    def wants(self, trigger: str, severity: str) -> bool:
        """True when enabled, not failing, subscribed to ``trigger`` and ``severity`` is
        at or above ``min_severity``."""
        return (self.enabled and not self.is_failing and trigger in (self.triggers or [])
                and SEVERITY_ORDER.get(severity, 0) >= SEVERITY_ORDER[self.min_severity])

    def matches_host(self, labels: dict[str, Any] | None) -> bool:
        """True when the host's ``labels`` carry every pair of ``host_labels``."""
        labels = labels or {}
        return all(str(labels.get(k)) == str(v) for k, v in (self.host_labels or {}).items())

    def mark_failing(self, reason: str) -> None:
        """Record a permanent failure (kept short for the UI)."""
        AlertChannel.objects.filter(pk=self.pk).update(
            failing_since=timezone.now(), failure_reason=reason[:1000])

    def clear_failing(self) -> None:
        """Forget a past failure (a successful send or an edit fixed it)."""
        AlertChannel.objects.filter(pk=self.pk).update(failing_since=None, failure_reason="")


class Delivery(models.Model):
    """One message to one channel, carrying one event or a group of events.

    ``message`` is the rendered :class:`alerts.transports.AlertMessage` as a dict, so a
    retry sends what was decided at dispatch. ``claim_token``/``claimed_at`` mark
    the attempt in progress; ``possible_duplicate`` is set when an attempt was
    taken over from a worker that died after claiming: had it already sent, the
    receiver got this twice (webhook receivers can dedupe on ``X-Fleet-Delivery``).
    """

    class Status(models.TextChoices):
        PENDING = "pending", "pending"
        SENDING = "sending", "sending"
        SENT = "sent", "sent"
        FAILED = "failed", "failed (gave up retrying)"
        PERMANENT_FAILURE = "permanent_failure", "failed permanently"

    code = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    channel = models.ForeignKey(AlertChannel, on_delete=models.CASCADE,
                                related_name="deliveries")
    trigger = models.CharField(max_length=32, choices=Trigger.choices)
    group_key = models.CharField(max_length=200)
    events = models.ManyToManyField(FindingEvent, blank=True, related_name="deliveries")
    message = models.JSONField(default=dict)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.PENDING,
                              db_index=True)
    attempts = models.PositiveIntegerField(default=0)
    response_code = models.IntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    claimed_at = models.DateTimeField(null=True, blank=True)
    claim_token = models.UUIDField(null=True, blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    possible_duplicate = models.BooleanField(default=False)

    class Meta:
        db_table = "audit_delivery"
        constraints = [models.UniqueConstraint(fields=["channel", "group_key"],
                                               name="one_delivery_per_channel_group")]
        indexes = [models.Index(fields=["status", "next_attempt_at"])]
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "deliveries"

    def __str__(self) -> str:
        return f"{self.trigger} → {self.channel} ({self.status})"

    @property
    def is_final(self) -> bool:
        return self.status in (self.Status.SENT, self.Status.FAILED,
                               self.Status.PERMANENT_FAILURE)

    @property
    def trigger_label(self) -> str:
        """Why this message was sent, in words ("Risky upgrade")."""
        return label(self.trigger)

    @property
    def title(self) -> str:
        return str(self.message.get("title", ""))


class DeliveryAttempt(models.Model):
    """One try at sending a delivery: outcome, response code, error, duration (ms)."""

    class Outcome(models.TextChoices):
        SENT = "sent", "sent"
        TRANSIENT = "transient", "failed, will retry"
        PERMANENT = "permanent", "failed permanently"
        LOST = "lost", "worker lost mid-attempt"

    delivery = models.ForeignKey(Delivery, on_delete=models.CASCADE, related_name="attempt_log")
    number = models.PositiveIntegerField()
    started_at = models.DateTimeField(default=timezone.now)
    outcome = models.CharField(max_length=16, choices=Outcome.choices)
    response_code = models.IntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        db_table = "audit_deliveryattempt"
        ordering = ["delivery", "number"]

    def __str__(self) -> str:
        return f"attempt {self.number} of delivery {self.delivery_id}: {self.outcome}"


class AlertThrottle(models.Model):
    """When ``channel`` last alerted on ``key`` (e.g. ``new_finding:<host>:<rule>``)."""

    channel = models.ForeignKey(AlertChannel, on_delete=models.CASCADE,
                                related_name="throttles")
    key = models.CharField(max_length=255)
    last_sent_at = models.DateTimeField()

    class Meta:
        db_table = "audit_alertthrottle"
        constraints = [models.UniqueConstraint(fields=["channel", "key"],
                                               name="one_throttle_per_channel_key")]

    def __str__(self) -> str:
        return f"{self.key} @ {self.last_sent_at:%Y-%m-%d %H:%M}"

    @classmethod
    def claim(cls, channel: AlertChannel, key: str, window: timedelta | None,
              now: datetime | None = None) -> bool:
        """True when ``channel`` may alert on ``key`` now (and records it).

        ``window`` None means once ever (e.g. one alert per silent-host episode).
        Concurrent callers: exactly one wins, through the unique key and a
        conditional update.
        """
        now = now or timezone.now()
        row, created = cls.objects.get_or_create(channel=channel, key=key,
                                                 defaults={"last_sent_at": now})
        if created:
            return True
        if window is None:
            return False
        return cls.objects.filter(pk=row.pk, last_sent_at__lte=now - window).update(
            last_sent_at=now) == 1


class AlertmanagerAlert(models.Model):
    """One alert an Alertmanager channel holds firing: ``key`` names what it stands for
    (``finding:<code>`` or ``host:<code>``), ``labels`` the label set last posted (its
    identity in Alertmanager), ``starts_at`` when it started firing, ``sent_at`` the last
    successful post and ``ends_at`` the ``endsAt`` posted then."""

    channel = models.ForeignKey(AlertChannel, on_delete=models.CASCADE,
                                related_name="alertmanager_alerts")
    key = models.CharField(max_length=100)
    labels = models.JSONField(default=dict)
    starts_at = models.DateTimeField()
    sent_at = models.DateTimeField()
    ends_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["channel", "key"],
                                               name="one_alertmanager_alert_per_key")]

    def __str__(self) -> str:
        return f"{self.key} on {self.channel_id}"
