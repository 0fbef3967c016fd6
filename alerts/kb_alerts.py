"""Knowledge-base alerts: the receiver of :data:`audit.signals.kb_attention`.

Judgement (``audit.kb_status``, ``audit.upstream``) says *that* the knowledge base needs
attention (stale, or a cited upstream issue changed); this module turns that into one
delivery per subscribed channel, once ever per key, through the same outbox as every alert.
"""

from __future__ import annotations

import datetime as dt

from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from alerts.alert_tasks import enqueue_sends
from alerts.alerts import absolute, create_delivery
from alerts.models import AlertChannel, AlertThrottle, Trigger
from alerts.transports import AlertItem

#: Knowledge-base alerts pass a channel's minimum-severity filter as "high": the KB itself
#: may be wrong, which every other alert relies on.
KB_ALERT_SEVERITY = "high"


def send_kb_alert(sender: object = None, *, key: str, headline: str, detail: str,
                  now: dt.datetime | None = None, **_: object) -> list[int]:
    """One knowledge-base alert per subscribed channel, once ever per ``key`` and channel
    (``AlertThrottle`` with no window); returns the new delivery ids (sent after commit)."""
    now = now or timezone.now()
    item = AlertItem(kind=Trigger.KNOWLEDGE_BASE, host="fleet",
                     host_url=absolute(reverse("audit:kb")), severity=KB_ALERT_SEVERITY,
                     headline=headline, detail=detail, at=now.isoformat())
    ids = []
    with transaction.atomic():
        for channel in AlertChannel.objects.filter(enabled=True, failing_since=None):
            if channel.wants(Trigger.KNOWLEDGE_BASE, KB_ALERT_SEVERITY) and \
                    AlertThrottle.claim(channel, f"kb:{key}"[:255], None, now):
                ids.append(create_delivery(channel, Trigger.KNOWLEDGE_BASE, [item],
                                           f"kb:{key}", now=now).pk)
        transaction.on_commit(lambda: enqueue_sends(ids))
    return ids
