"""Alertmanager channels mirror the dashboard's state: one alert per open finding.

An Alertmanager channel does not receive finding events (the dispatch skips channels whose
transport ``syncs_state``). Instead :func:`sync_channel` computes what should be firing
and posts the difference:

- every finding that is open (not acknowledged, not silenced: ``Finding.objects.alerting``)
  at or above the channel's minimum severity, on a host matching its host labels, whose
  trigger the channel hears (new finding, live-metric alarm; a crash loop is a risky
  upgrade), is one ``FleetAuditFinding`` alert; findings open before the channel existed
  or since a host's first report included (a backfill: ``include_initial`` does not apply);
- every host that stopped reporting (``alerts.alerts.silent_hosts``) is one
  ``FleetAuditHostOffline`` alert while the channel hears ``host_silent``;
- each is posted with ``endsAt`` 4 × ``ALERTMANAGER_RESEND_S`` ahead and posted again
  once half an interval old, so an open finding never expires in Alertmanager while the
  beat task ``alerts.sync_alertmanager`` runs (the factor is Prometheus' own: its rule
  manager sends ``endsAt`` = now + 4 × max(resend delay, evaluation interval),
  https://github.com/prometheus/prometheus/blob/main/rules/manager.go ``sendAlerts``);
- what no longer should fire (resolved, acknowledged, silenced, below the minimum after a
  downgrade, host reporting again, channel disabled) is posted once with ``endsAt`` now.

Identity. Alertmanager identifies an alert by its whole label set. The labels are
``alertname``, ``source``, ``finding_id`` (the finding's code, stable for its life),
``host``, ``server``, ``rule_id``, ``severity`` and the exported host labels
(``FLEET_EXPORTED_HOST_LABELS``, default ``env``, ``team``). ``severity`` stays a label
because routes match on it; when it changes (an escalation) or a host label changes, the
old label set is resolved and the new one fired **in the same POST**, so Alertmanager
never holds both, and ``finding_id`` is the key to group or inhibit on across such a
change. What was posted per finding/host is kept in
:class:`~alerts.models.AlertmanagerAlert`.

One sync per channel at a time: the channel row is locked (``SKIP LOCKED``: a second
sync finds it busy and leaves). A failed POST changes no state row, so the next sync
retries the same difference; a permanent failure (4xx, refused TLS material) marks the
channel failing, like a failed delivery. ``AlertChannel.synced_at`` is the end of the last
complete sync and ``sync_error`` why the last one stopped: the Alerts page shows both and
``/metrics`` exports the age (``fleet_audit_alertmanager_sync_age_seconds``), so an
Alertmanager that stopped accepting is seen before its alerts expire.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from alerts.alerts import HOST_SILENT_SEVERITY, finding_url, host_url, opened_trigger, silent_hosts
from alerts.models import AlertChannel, AlertmanagerAlert, Trigger
from alerts.transports import TransportError
from alerts.transports.alertmanager import SOURCE, postable
from audit.models import SEVERITY_ORDER, Finding, Rule
from fleet.models import Host

log = logging.getLogger(__name__)

FINDING_ALERTNAME = "FleetAuditFinding"
HOST_ALERTNAME = "FleetAuditHostOffline"
#: Alerts per POST (Alertmanager takes any number; smaller bodies fail and retry cheaper).
BATCH = 500
#: Default resend interval, seconds (settings ALERTMANAGER_RESEND_S).
DEFAULT_RESEND_S = 60


def resend_interval() -> timedelta:
    """``ALERTMANAGER_RESEND_S`` as a timedelta (alerts end 4 of these after a post)."""
    return timedelta(seconds=float(getattr(settings, "ALERTMANAGER_RESEND_S",
                                           DEFAULT_RESEND_S)))


def exported_labels(labels: dict[str, Any] | None) -> dict[str, str]:
    """The host's labels named in ``FLEET_EXPORTED_HOST_LABELS`` (strings, clipped by the
    transport); other keys are never exported, so series and label sets stay bounded."""
    labels = labels if isinstance(labels, dict) else {}
    return {key: str(labels[key]) for key in settings.FLEET_EXPORTED_HOST_LABELS
            if labels.get(key) not in (None, "")}


@dataclass
class Wanted:
    """One alert that should be firing: ``key`` names what it stands for."""

    key: str
    labels: dict[str, str]
    annotations: dict[str, str]
    starts_at: datetime
    url: str = ""


def _finding_alert(finding: Finding) -> Wanted:
    labels = {"alertname": FINDING_ALERTNAME, "source": SOURCE,
              "finding_id": str(finding.code), "host": finding.host.hostname,
              "server": finding.server.identity, "rule_id": finding.rule_id,
              "severity": finding.severity, **exported_labels(finding.host.labels)}
    url = finding_url(finding)
    annotations = {"summary": f"{finding.title} on {finding.host.hostname}",
                   "description": finding.message[:600], "remediation": finding.remediation,
                   "dashboard_url": url, "kind": finding.kind}
    return Wanted(f"finding:{finding.code}", labels, annotations, finding.first_seen, url)


def _host_alert(host: Host, now: datetime) -> Wanted:
    quiet = host.seconds_since_seen(now) or 0
    url = host_url(host)
    labels = {"alertname": HOST_ALERTNAME, "source": SOURCE, "host": host.hostname,
              "severity": HOST_SILENT_SEVERITY, **exported_labels(host.labels)}
    annotations = {"summary": f"{host.hostname} stopped reporting to vLLM Fleet Audit",
                   "description": f"No report for {quiet // 60} min {quiet % 60} s (last at "
                                  f"{host.last_seen:%Y-%m-%d %H:%M:%S} UTC).",
                   "dashboard_url": url}
    return Wanted(f"host:{host.code}", labels, annotations, host.last_seen or now, url)


def wanted_alerts(channel: AlertChannel, now: datetime) -> dict[str, Wanted]:
    """Every alert ``channel`` should hold firing now, by key (empty when disabled)."""
    floor = SEVERITY_ORDER.get(channel.min_severity, 0)
    severities = [s for s, rank in SEVERITY_ORDER.items() if rank >= floor]
    findings = list(Finding.objects.alerting(now).filter(severity__in=severities)
                    .select_related("host", "server").order_by("pk"))
    rules = {r.rule_id: r for r in Rule.objects.filter(
        rule_id__in={f.rule_id for f in findings})}
    wanted: dict[str, Wanted] = {}
    for finding in findings:
        trigger = opened_trigger(finding, rules)
        if channel.wants(trigger, finding.severity) and channel.matches_host(
                finding.host.labels):
            alert = _finding_alert(finding)
            wanted[alert.key] = alert
    if channel.wants(Trigger.HOST_SILENT, HOST_SILENT_SEVERITY):
        for host in silent_hosts(now):
            if channel.matches_host(host.labels):
                alert = _host_alert(host, now)
                wanted[alert.key] = alert
    return wanted


@dataclass
class SyncResult:
    """What one sync did: alerts posted firing, posted resolved, and the error if any."""

    firing: int = 0
    resolved: int = 0
    error: str = ""
    skipped: bool = False


@dataclass
class _Post:
    """One alert in a POST and what it does to the key's state row: ``new`` (insert or
    relabel), ``refresh`` (same labels re-sent), ``resolve`` (the row goes) or ``replaced``
    (the old label set of a key that keeps firing: its row is rewritten by the ``new``)."""

    alert: dict[str, Any]
    key: str
    action: str
    labels: dict[str, str] | None = None
    starts_at: datetime | None = None

    @property
    def firing(self) -> bool:
        return self.action in ("new", "refresh")


def _plan(wanted: dict[str, Wanted], state: dict[str, AlertmanagerAlert],
          now: datetime) -> list[_Post]:
    """The posts that bring Alertmanager from ``state`` to ``wanted``."""
    interval = resend_interval()
    ends = now + 4 * interval
    posts: list[_Post] = []
    for key, want in wanted.items():
        row = state.get(key)
        starts = want.starts_at
        action = "new"
        if row is not None and row.labels != want.labels:
            # Same finding, new label set (escalation): resolve the old one in this POST.
            posts.append(_Post(postable(row.labels, {}, row.starts_at, now), key, "replaced"))
            starts = now
        elif row is not None:
            starts, action = row.starts_at, "refresh"
            if row.sent_at > now - interval / 2:
                continue  # posted moments ago; the beat re-sends it well before endsAt
        posts.append(_Post(postable(want.labels, want.annotations, starts, ends, want.url),
                           key, action, want.labels, starts))
    for key, row in state.items():
        if key not in wanted:
            posts.append(_Post(postable(row.labels, {}, row.starts_at, now), key, "resolve"))
    return posts


def _batches(posts: list[_Post]) -> Iterator[list[_Post]]:
    """Batches of :data:`BATCH`; a key's resolve and re-fire always travel together."""
    batch: list[_Post] = []
    for post in posts:
        if len(batch) >= BATCH and batch[-1].action != "replaced":
            yield batch
            batch = []
        batch.append(post)
    if batch:
        yield batch


def _apply(channel: AlertChannel, batch: list[_Post], now: datetime) -> None:
    """Record a posted batch in three statements: a DELETE of the resolved keys, an UPDATE
    of the re-sent ones (the common case: every open finding each interval) and an upsert of
    the new label sets."""
    ends = now + 4 * resend_interval()
    rows = AlertmanagerAlert.objects.filter(channel=channel)
    gone = [p.key for p in batch if p.action == "resolve"]
    if gone:
        rows.filter(key__in=gone).delete()
    again = [p.key for p in batch if p.action == "refresh"]
    if again:
        rows.filter(key__in=again).update(sent_at=now, ends_at=ends)
    fresh = [AlertmanagerAlert(channel=channel, key=p.key, labels=p.labels,
                               starts_at=p.starts_at, sent_at=now, ends_at=ends)
             for p in batch if p.action == "new"]
    if fresh:  # new keys and relabelled ones (an escalation) in one upsert
        AlertmanagerAlert.objects.bulk_create(
            fresh, update_conflicts=True, unique_fields=["channel", "key"],
            update_fields=["labels", "starts_at", "sent_at", "ends_at"])


def sync_channel(channel_id: int, now: datetime | None = None) -> SyncResult:
    """Bring channel ``channel_id``'s Alertmanager to the dashboard's state (module
    docstring). Returns what was posted; never raises for a transport failure."""
    now = now or timezone.now()
    result = SyncResult()
    with transaction.atomic():
        channel = (AlertChannel.objects.select_for_update(skip_locked=True)
                   .filter(pk=channel_id).first())
        if channel is None or channel.is_failing or not channel.transport().syncs_state:
            result.skipped = True
            return result
        wanted = wanted_alerts(channel, now)
        state = {row.key: row for row in channel.alertmanager_alerts.all()}
        transport = channel.transport()
        for batch in _batches(_plan(wanted, state, now)):
            try:
                transport.post_alerts([p.alert for p in batch])  # type: ignore[attr-defined]
            except TransportError as exc:
                result.error = exc.message
                if exc.permanent:
                    channel.mark_failing(f"{transport.label}: {exc.message}")
                log.warning("alertmanager channel %s: sync stopped: %s", channel.pk,
                            exc.message)
                break
            _apply(channel, batch, now)
            result.firing += sum(1 for p in batch if p.firing)
            result.resolved += sum(1 for p in batch if p.action == "resolve")
        done = {"sync_error": result.error[:1000]}
        if not result.error:
            done["synced_at"] = timezone.now()
        AlertChannel.objects.filter(pk=channel.pk).update(**done)
    return result


def state_channels() -> list[int]:
    """Ids of the channels kept in sync (enabled or not: a disabled one is emptied)."""
    from alerts.transports import REGISTRY

    kinds = [kind for kind, cls in REGISTRY.items() if cls.syncs_state]
    return list(AlertChannel.objects.filter(kind__in=kinds, failing_since=None)
                .order_by("pk").values_list("pk", flat=True))
