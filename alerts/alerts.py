"""Alert routing: which finding events reach which channel, grouped and throttled.

Flow (driven by :mod:`alerts.alert_tasks`):

1. :func:`dispatch` claims undispatched :class:`~audit.models.FindingEvent` rows
   (``SELECT ... FOR UPDATE SKIP LOCKED`` then ``dispatched_at`` set, one
   transaction), so two dispatchers never take the same event;
2. :func:`classify` turns each event into a trigger (risky upgrade, new finding,
   resolved, metric alarm) or drops it: acknowledged and silenced findings never
   alert, and risky upgrades only list findings nobody muted;
3. per channel: filters (enabled, not failing, trigger, minimum severity, host
   labels, first-report events only with ``include_initial``) and the per
   (host, rule) throttle (:class:`~audit.models.AlertThrottle`);
4. all events of one trigger for one channel become ONE :class:`~audit.models.Delivery`
   (a fleet upgrade of 200 hosts is one message listing them), whose rendered
   :class:`~alerts.transports.AlertMessage` is stored on the row.

Sending lives in :mod:`alerts.alert_sending`; host-silence detection is
:func:`dispatch_silent_hosts`.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.urls import NoReverseMatch, reverse
from django.utils import timezone

from alerts.models import AlertChannel, AlertThrottle, Delivery, Trigger
from alerts.transports import REGISTRY, AlertItem, AlertMessage, FindingRef
from audit.crashloop import CRASH_LOOP_RULE_ID
from audit.kb.labels import label
from audit.models import SEVERITY_ORDER, Finding, FindingEvent, Rule
from fleet.models import Host

log = logging.getLogger(__name__)

#: Seconds of events grouped into one message per channel and trigger.
DEFAULT_GROUP_WINDOW_S = 60
#: Seconds during which a repeat of the same (channel, host, rule) alert is dropped.
DEFAULT_THROTTLE_S = 3600
#: Agent intervals without a report before a host counts as silent (default).
DEFAULT_SILENT_INTERVALS = 5
#: Agent interval assumed when a host never said (fleet_agent/config.py default).
DEFAULT_AGENT_INTERVAL_S = 30
#: Severity given to "host stopped reporting" for the channel's minimum-severity filter.
HOST_SILENT_SEVERITY = "high"
#: A risky upgrade is at least this severe, even when only a KB ceiling matched.
RISKY_UPGRADE_FLOOR = "high"
#: Events claimed per dispatch run (the rest wait for the next run).
DISPATCH_BATCH = 5000


def group_window() -> timedelta:
    """``ALERT_GROUP_WINDOW_S`` as a timedelta."""
    return timedelta(seconds=getattr(settings, "ALERT_GROUP_WINDOW_S", DEFAULT_GROUP_WINDOW_S))


@dataclass
class Routed:
    """An event that may alert: its trigger, severity, throttle key and message line."""

    event: FindingEvent
    trigger: str
    severity: str
    throttle_key: str
    item: AlertItem


# --- links -------------------------------------------------------------------------

def absolute(path: str) -> str:
    """``SITE_URL`` + ``path`` (``SITE_URL`` has no trailing slash)."""
    return f"{getattr(settings, 'SITE_URL', '')}{path}"


def host_url(host: Host) -> str:
    """Absolute link to the host page."""
    return absolute(reverse("fleet:host_detail", args=[host.code]))


def finding_url(finding: Finding) -> str:
    """Absolute link to the finding page, or its host page while there is none."""
    try:
        return absolute(reverse("audit:finding_detail", args=[finding.code]))
    except NoReverseMatch:
        return host_url(finding.host)


def fleet_url() -> str:
    """Absolute link to the hosts list."""
    return absolute(reverse("fleet:host_list"))


# --- classification ----------------------------------------------------------------

def is_muted(finding: Finding | None, at: datetime) -> bool:
    """True for an acknowledged finding or one silenced past ``at``."""
    if finding is None:
        return False
    if finding.status == Finding.Status.ACKNOWLEDGED:
        return True
    return finding.silenced_until is not None and finding.silenced_until > at and (
        finding.status in (Finding.Status.SILENCED, Finding.Status.RESOLVED))


def _ref(rule_id: str, title: str, severity: str, rules: dict[str, Rule | None],
         finding: Finding | None = None) -> FindingRef:
    if rule_id not in rules:  # e.g. a ceiling finding the event payload did not name
        rules[rule_id] = Rule.objects.filter(rule_id=rule_id).first()
    rule = rules[rule_id]
    remediation = (finding.remediation if finding else "") or (rule.remediation if rule else "")
    return FindingRef(rule_id=rule_id, title=title or (rule.title if rule else rule_id),
                      severity=severity, fixed_in=(rule.fixed_in if rule else "") or "",
                      remediation=remediation, url=finding_url(finding) if finding else "")


#: Marker of a finding a live probe confirmed (audit/kb/probes.py summary).
PROBE_CONFIRMED = "Confirmed on this server by a live probe"
#: After an upgrade, earlier probe results no longer hold (they are re-armed).
PROBE_HINT = ("Earlier live-probe results are re-armed: run the live probes (host page) to "
              "see which advisories are real on this server.")


def _server_name(event: FindingEvent) -> str:
    return event.server.identity if event.server_id else ""


def _finding_route(event: FindingEvent, rules: dict[str, Rule | None]) -> Routed | None:
    finding = event.finding
    if finding is None or is_muted(finding, event.at):
        return None
    severity = event.severity or finding.severity
    if event.kind == FindingEvent.Kind.RESOLVED:
        trigger, headline = Trigger.RESOLVED, f"resolved: {finding.title}"
    elif event.kind == FindingEvent.Kind.SEVERITY_CHANGED:
        old, new = event.payload.get("old", ""), event.payload.get("new", severity)
        if SEVERITY_ORDER.get(new, 0) <= SEVERITY_ORDER.get(old, 0):
            return None  # only escalations alert; a downgrade is good news
        severity = new
        trigger = opened_trigger(finding, rules)
        headline = f"escalated {old} → {new}: {finding.title}"
        if PROBE_CONFIRMED in finding.message:  # a live probe decided it
            headline = f"confirmed on this server, escalated {old} → {new}: {finding.title}"
    else:
        trigger, headline = opened_trigger(finding, rules), finding.title
    item = AlertItem(kind=event.kind, host=event.host.hostname, host_url=host_url(event.host),
                     server=_server_name(event), severity=severity, headline=headline,
                     detail=finding.message[:600], at=event.at.isoformat(),
                     findings=[_ref(finding.rule_id, finding.title, severity, rules, finding)])
    key = f"{trigger}:{event.host_id}:{finding.rule_id}"
    return Routed(event, trigger, severity, key, item)


def opened_trigger(finding: Finding, rules: dict[str, Rule | None]) -> str:
    """Metric rules (kind ``metric``, or any rule on the ``metrics`` cadence, such as the
    KV-cache ceiling) raise live-metric alarms; everything else is a new finding."""
    if finding.rule_id == CRASH_LOOP_RULE_ID:
        return Trigger.RISKY_UPGRADE  # a server that does not come back
    rule = rules.get(finding.rule_id)
    live = finding.kind == "metric" or (rule is not None and rule.cadence == "metrics")
    return Trigger.METRIC_ALARM if live else Trigger.NEW_FINDING


def _upgrade_refs(event: FindingEvent, rules: dict[str, Rule | None]) -> list[FindingRef]:
    """Findings the upgrade brings that nobody muted (high+, or KB ceilings it opened)."""
    listed = event.payload.get("opened" if event.kind == FindingEvent.Kind.VERSION_CHANGED
                               else "would_open") or []
    active: dict[str, Finding] = {}
    if event.server_id:
        active = {f.rule_id: f for f in Finding.objects.active().filter(server_id=event.server_id)}
    refs, seen = [], set()
    for entry in listed:
        rule_id = entry.get("rule_id", "")
        finding = active.get(rule_id)
        if is_muted(finding, event.at) or rule_id in seen:
            continue
        seen.add(rule_id)
        refs.append(_ref(rule_id, entry.get("title", ""), entry.get("severity", ""), rules,
                         finding))
    if event.kind == FindingEvent.Kind.VERSION_CHANGED:
        for finding in active.values():  # ceilings the new version crossed, any severity
            if (finding.kind == "ceiling" and finding.first_seen == event.at
                    and finding.rule_id not in seen and not is_muted(finding, event.at)):
                refs.append(_ref(finding.rule_id, finding.title, finding.severity, rules,
                                 finding))
    return sorted(refs, key=lambda r: -SEVERITY_ORDER.get(r.severity, 0))


def _upgrade_route(event: FindingEvent, rules: dict[str, Rule | None]) -> Routed | None:
    refs = _upgrade_refs(event, rules)
    if not refs:
        return None
    payload = event.payload
    worst = max((r.severity for r in refs), key=lambda s: SEVERITY_ORDER.get(s, 0))
    severity = max(worst, RISKY_UPGRADE_FLOOR, key=lambda s: SEVERITY_ORDER.get(s, 0))
    names = ", ".join(r.title for r in refs[:3]) + ("…" if len(refs) > 3 else "")
    if event.kind == FindingEvent.Kind.VERSION_CHANGED:
        old, new, state = payload.get("old", "?"), payload.get("new", "?"), "running"
        headline = f"vLLM {old} → {new}"
        detail = (f"Now running vLLM {new}, which brings {len(refs)} finding(s): {names}. "
                  f"{PROBE_HINT}")
    else:
        old, new, state = payload.get("running", "?"), payload.get("installed", "?"), "pending"
        headline = f"vLLM {old} → {new} installed, not yet running"
        detail = (f"The next restart runs vLLM {new}, which would bring {len(refs)} "
                  f"finding(s): {names}")
    item = AlertItem(kind=event.kind, host=event.host.hostname, host_url=host_url(event.host),
                     server=_server_name(event), severity=severity, headline=headline,
                     detail=detail, at=event.at.isoformat(), findings=refs)
    key = f"{Trigger.RISKY_UPGRADE}:{event.server_id}:{new}:{state}"
    return Routed(event, Trigger.RISKY_UPGRADE, severity, key, item)


_FINDING_KINDS = (FindingEvent.Kind.OPENED, FindingEvent.Kind.RESOLVED,
                  FindingEvent.Kind.SEVERITY_CHANGED)
_UPGRADE_KINDS = (FindingEvent.Kind.VERSION_CHANGED, FindingEvent.Kind.PENDING_UPGRADE)


def classify(event: FindingEvent, rules: dict[str, Rule | None] | None = None) -> Routed | None:
    """The alert ``event`` may raise, or None (not alert-worthy, or its finding muted).

    ``rules`` maps rule_id to :class:`Rule` (for ``fixed_in`` and remediation);
    looked up when not given.
    """
    if rules is None:
        rules = rules_for([event])
    if event.kind in _FINDING_KINDS:
        return _finding_route(event, rules)
    if event.kind in _UPGRADE_KINDS:
        return _upgrade_route(event, rules)
    return None


def rules_for(events: Iterable[FindingEvent]) -> dict[str, Rule | None]:
    """The Rule rows any of ``events`` may name (their rule_id and payload lists)."""
    ids: set[str] = set()
    for event in events:
        if event.rule_id:
            ids.add(event.rule_id)
        for key in ("opened", "would_open"):
            ids.update(e.get("rule_id", "") for e in event.payload.get(key) or [])
    return {r.rule_id: r for r in Rule.objects.filter(rule_id__in=ids)}


# --- messages ----------------------------------------------------------------------


def build_message(trigger: str, items: list[AlertItem], delivery: uuid.UUID,
                  channel: AlertChannel, now: datetime) -> AlertMessage:
    """The message for ``items`` (one trigger), most severe first; ``delivery`` its code."""
    items = sorted(items, key=lambda i: (-SEVERITY_ORDER.get(i.severity, 0), i.host, i.server))
    severity = items[0].severity if items else "info"
    hosts = sorted({i.host for i in items})
    noun = label(trigger)  # one mapping for pages, email and Slack (audit/kb/labels.py)
    if len(items) == 1:
        title = f"{noun} on {items[0].host}: {items[0].headline}"
        summary, url = items[0].detail or items[0].headline, items[0].host_url
    else:
        title = f"{noun}: {len(items)} on {len(hosts)} host(s)"
        summary = _group_summary(trigger, items, hosts)
        url = fleet_url()
    return AlertMessage(trigger=trigger, title=title[:250], severity=severity, summary=summary,
                        url=url, items=items, delivery=str(delivery), channel=channel.name,
                        created_at=now.isoformat())


def _group_summary(trigger: str, items: list[AlertItem], hosts: list[str]) -> str:
    shown = ", ".join(hosts[:10]) + (f" and {len(hosts) - 10} more" if len(hosts) > 10 else "")
    if trigger == Trigger.RISKY_UPGRADE:
        moves = sorted({i.headline for i in items})
        return f"{len(hosts)} host(s) ({shown}): " + "; ".join(moves[:5])
    if trigger == Trigger.HOST_SILENT:
        return f"{len(hosts)} host(s) stopped reporting: {shown}"
    return f"{len(items)} alert(s) on {shown}"


def _group_key(trigger: str, events: list[FindingEvent]) -> str:
    """Deterministic per claimed event set (events are claimed once, so keys never repeat)."""
    ids = sorted(e.pk for e in events)
    digest = hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()[:16]
    return f"{trigger}:{ids[0]}-{ids[-1]}:{len(ids)}:{digest}"


def create_delivery(channel: AlertChannel, trigger: str, items: list[AlertItem],
                    group_key: str, events: list[FindingEvent] | None = None,
                    now: datetime | None = None, test: bool = False) -> Delivery:
    """Insert one pending delivery with its rendered message (and its events)."""
    now = now or timezone.now()
    code = uuid.uuid4()
    message = build_message(trigger, items, code, channel, now)
    message.test = test
    delivery = Delivery.objects.create(code=code, channel=channel, trigger=trigger,
                                       group_key=group_key[:200], message=message.as_dict(),
                                       created_at=now)
    if events:
        delivery.events.set(events)
    return delivery


# --- dispatch ----------------------------------------------------------------------

def event_channels() -> list[AlertChannel]:
    """Enabled, working channels fed by finding events: not those that mirror the state
    (Alertmanager, :mod:`alerts.alertmanager_sync`)."""
    synced = [kind for kind, cls in REGISTRY.items() if cls.syncs_state]
    return list(AlertChannel.objects.filter(enabled=True, failing_since=None)
                .exclude(kind__in=synced))


def claim_events(now: datetime, min_age: timedelta | None = None,
                 limit: int = DISPATCH_BATCH) -> list[FindingEvent]:
    """Claim up to ``limit`` undispatched events (older than ``min_age`` when given).

    Must run inside a transaction: rows are locked (skipping rows another
    dispatcher holds) and marked ``dispatched_at=now``.
    """
    pending = FindingEvent.objects.select_for_update(skip_locked=True, of=("self",)).filter(
        dispatched_at=None)
    if min_age is not None:
        pending = pending.filter(at__lte=now - min_age)
    ids = list(pending.order_by("id").values_list("id", flat=True)[:limit])
    FindingEvent.objects.filter(pk__in=ids).update(dispatched_at=now)
    return list(FindingEvent.objects.filter(pk__in=ids)
                .select_related("finding", "host", "server").order_by("id"))


def _eligible(channel: AlertChannel, routed: Routed) -> bool:
    return (channel.wants(routed.trigger, routed.severity)
            and channel.matches_host(routed.event.host.labels)
            and (channel.include_initial or not routed.event.initial))


def _covered(routed: Routed) -> set[tuple[int | None, str]]:
    """(server, rule) pairs a running-version upgrade alert already lists."""
    if routed.event.kind != FindingEvent.Kind.VERSION_CHANGED:
        return set()
    return {(routed.event.server_id, ref.rule_id) for ref in routed.item.findings}


def bucket(routed: list[Routed], channels: list[AlertChannel],
           now: datetime) -> dict[tuple[AlertChannel, str], list[Routed]]:
    """Group ``routed`` per (channel, trigger) after filters and the throttle.

    A finding opened by an upgrade is not also sent as a "new finding" to a channel
    that gets the upgrade alert listing it (one message, not two).
    """
    throttle = timedelta(seconds=getattr(settings, "ALERT_THROTTLE_S", DEFAULT_THROTTLE_S))
    upgrades_first = sorted(routed, key=lambda r: r.trigger != Trigger.RISKY_UPGRADE)
    buckets: dict[tuple[AlertChannel, str], list[Routed]] = defaultdict(list)
    for channel in channels:
        covered: set[tuple[int | None, str]] = set()
        for item in upgrades_first:
            if not _eligible(channel, item) or not AlertThrottle.claim(
                    channel, item.throttle_key, throttle, now):
                continue
            if (item.event.server_id, item.event.rule_id) in covered:
                continue
            covered |= _covered(item)
            buckets[(channel, item.trigger)].append(item)
    return buckets


def dispatch(now: datetime | None = None, min_age: timedelta | None = None) -> list[int]:
    """Claim undispatched events and create one delivery per (channel, trigger).

    Returns the new delivery ids (the caller enqueues their sends after commit).
    """
    now = now or timezone.now()
    with transaction.atomic():
        events = claim_events(now, min_age)
        if not events:
            return []
        rules = rules_for(events)
        routed = [r for r in (classify(e, rules) for e in events) if r is not None]
        channels = event_channels()
        ids = []
        for (channel, trigger), group in bucket(routed, channels, now).items():
            evts = [r.event for r in group]
            ids.append(create_delivery(channel, trigger, [r.item for r in group],
                                       _group_key(trigger, evts), evts, now).pk)
    log.info("dispatched %d events into %d deliveries", len(events), len(ids))
    return ids


# --- silent hosts ------------------------------------------------------------------

def silent_hosts(now: datetime | None = None) -> list[Host]:
    """Hosts with no report for ``ALERT_HOST_SILENT_INTERVALS`` of their agent interval
    (``DEFAULT_AGENT_INTERVAL_S`` when unknown). Hosts that never reported are skipped."""
    now = now or timezone.now()
    intervals = getattr(settings, "ALERT_HOST_SILENT_INTERVALS", DEFAULT_SILENT_INTERVALS)
    floor = now - timedelta(seconds=intervals)  # the smallest possible threshold (1 s interval)
    hosts = Host.objects.filter(last_seen__lt=floor).order_by("hostname")
    return [h for h in hosts if h.last_seen < now - timedelta(
        seconds=intervals * (h.agent_interval_s or DEFAULT_AGENT_INTERVAL_S))]


def _silent_item(host: Host, now: datetime) -> AlertItem:
    quiet = host.seconds_since_seen(now) or 0
    return AlertItem(kind=Trigger.HOST_SILENT, host=host.hostname, host_url=host_url(host),
                     severity=HOST_SILENT_SEVERITY,
                     headline=f"no report for {quiet // 60} min {quiet % 60} s",
                     detail=f"Last report at {host.last_seen:%Y-%m-%d %H:%M:%S} UTC; the agent "
                            f"reports every {host.agent_interval_s or DEFAULT_AGENT_INTERVAL_S} s.",
                     at=now.isoformat())


def dispatch_silent_hosts(now: datetime | None = None) -> list[int]:
    """One delivery per subscribed channel listing hosts that newly went silent.

    Each silence episode (host, last_seen) alerts a channel once. Returns delivery ids.
    """
    now = now or timezone.now()
    hosts = silent_hosts(now)
    if not hosts:
        return []
    ids = []
    with transaction.atomic():
        for channel in event_channels():
            if not channel.wants(Trigger.HOST_SILENT, HOST_SILENT_SEVERITY):
                continue
            fresh = [h for h in hosts if channel.matches_host(h.labels) and AlertThrottle.claim(
                channel, f"host_silent:{h.pk}:{h.last_seen.isoformat()}", None, now)]
            if fresh:
                key = "host_silent:" + hashlib.sha256("|".join(
                    f"{h.pk}@{h.last_seen.isoformat()}" for h in fresh).encode()).hexdigest()
                ids.append(create_delivery(channel, Trigger.HOST_SILENT,
                                           [_silent_item(h, now) for h in fresh], key[:200],
                                           now=now).pk)
    return ids


def create_test_delivery(channel: AlertChannel) -> Delivery:
    """A "send test" delivery for ``channel`` (sent through the normal send path)."""
    now = timezone.now()
    item = AlertItem(kind=Trigger.TEST, host="example-gpu-node", host_url=fleet_url(),
                     severity="info", headline="test message",
                     detail=f"If you can read this, channel {channel.name!r} works.",
                     at=now.isoformat())
    return create_delivery(channel, Trigger.TEST, [item], f"test:{uuid.uuid4()}", now=now,
                           test=True)
