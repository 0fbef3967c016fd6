"""Celery tasks of the alerts (queue ``alerts``: task names start with ``alerts.``).

- ``alerts.dispatch_events``: claim undispatched finding events, create grouped
  deliveries, enqueue their sends after commit. :func:`schedule_dispatch` runs it
  ``ALERT_GROUP_WINDOW_S`` after the first new event, so events arriving within
  the window become one message per channel.
- ``alerts.send_delivery(delivery_id)``: send one delivery (see
  :mod:`alerts.alert_sending`); transient failures retry with a countdown kept
  below half the broker visibility timeout.
- ``alerts.sweep`` (beat, every window): dispatch events older than the window
  that no scheduled dispatch took, and re-enqueue deliveries whose task was lost.
- ``alerts.check_silent_hosts`` (beat, every minute): "host stopped reporting".
- ``alerts.sync_alertmanager`` (beat, every ``ALERTMANAGER_RESEND_S``; also queued after
  each dispatch and when a channel is saved): Alertmanager channels brought to the
  findings' state (:mod:`alerts.alertmanager_sync`).

All take ids or nothing, are safe to run twice (rows are claimed), hence ``acks_late``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import timedelta
from functools import partial

from celery import Celery, Task, shared_task
from django.core.cache import cache
from django.db import transaction
from kombu.exceptions import OperationalError as BrokerError

from alerts import alert_sending, alertmanager_sync, alerts

log = logging.getLogger(__name__)

#: Hard and soft time limits of one send, seconds. The claim lease
#: (ALERT_CLAIM_LEASE_S, default 120) must stay above the hard limit.
SEND_TIME_LIMIT_S = 90
SEND_SOFT_TIME_LIMIT_S = 60
_SCHEDULED_KEY = "alerts:dispatch-scheduled"


def retry_ceiling_s(app: Celery) -> float:
    """Half the broker visibility timeout (seconds): retry countdowns stay below it,
    because Redis redelivers a task held unacked (an ETA) longer than the timeout."""
    options = app.conf.broker_transport_options or {}
    return float(options.get("visibility_timeout", 3600)) / 2


def enqueue_sends(delivery_ids: Iterable[int]) -> int:
    """Enqueue ``send_delivery`` per id; returns how many were queued. A broker
    outage stops early (logged); the sweep re-enqueues the rest later."""
    queued = 0
    for delivery_id in delivery_ids:
        try:
            send_delivery.delay(delivery_id)
        except BrokerError as exc:
            log.warning("broker unavailable, %d sends left to the sweep: %s", queued, exc)
            break
        queued += 1
    return queued


def on_findings_evaluated(sender: object = None, **kwargs: object) -> None:
    """Receiver of :data:`audit.signals.findings_evaluated`: schedule the outbox dispatch."""
    schedule_dispatch()


def schedule_dispatch() -> bool:
    """Run ``dispatch_events`` one group window from now, unless one is already due.

    Call it after committing finding events (``transaction.on_commit(schedule_dispatch)``).
    Returns True when this call scheduled the run.
    """
    window = alerts.group_window().total_seconds()
    return _queue_once(_SCHEDULED_KEY, dispatch_events, window,
                       "cannot schedule alert dispatch (the sweep will)")


@shared_task(name="alerts.dispatch_events", acks_late=True, ignore_result=True)
def dispatch_events(min_age_s: float | None = None) -> int:
    """Claim undispatched events (older than ``min_age_s`` seconds when given), create
    one delivery per (channel, trigger) and enqueue them. Returns the delivery count."""
    min_age = timedelta(seconds=min_age_s) if min_age_s is not None else None
    ids = alerts.dispatch(min_age=min_age)
    transaction.on_commit(partial(enqueue_sends, ids))
    transaction.on_commit(enqueue_sync)
    return len(ids)


# acks_late is safe: send() claims the row, so a redelivered task sends at most once more
# only when the first worker died between sending and recording (flagged on the row).
@shared_task(bind=True, name="alerts.send_delivery", acks_late=True, ignore_result=True,
             max_retries=None, soft_time_limit=SEND_SOFT_TIME_LIMIT_S,
             time_limit=SEND_TIME_LIMIT_S)
def send_delivery(self: Task, delivery_id: int) -> str:
    """Send delivery ``delivery_id``; returns the outcome (sent, skipped, permanent,
    failed). Transient failures raise ``Retry`` with the backoff countdown."""
    result = alert_sending.send(delivery_id, ceiling_s=retry_ceiling_s(self.app))
    if result.status == "retry":
        raise self.retry(countdown=result.retry_in)
    return result.status


@shared_task(name="alerts.sweep", acks_late=True, ignore_result=True)
def sweep() -> dict[str, int]:
    """Beat: dispatch events older than the group window, re-enqueue lost sends.

    Returns ``{"deliveries": n, "requeued": n}``.
    """
    ids = alerts.dispatch(min_age=alerts.group_window())
    lost = alert_sending.stragglers()
    transaction.on_commit(partial(enqueue_sends, ids + lost))
    return {"deliveries": len(ids), "requeued": len(lost)}


@shared_task(name="alerts.check_silent_hosts", acks_late=True, ignore_result=True)
def check_silent_hosts() -> int:
    """Beat: alert subscribed channels about hosts that stopped reporting. Returns the
    number of deliveries created."""
    ids = alerts.dispatch_silent_hosts()
    transaction.on_commit(partial(enqueue_sends, ids))
    return len(ids)


@shared_task(name="alerts.sync_alertmanager", acks_late=True, ignore_result=True)
def sync_alertmanager(channel_id: int | None = None) -> dict[str, int]:
    """Sync one Alertmanager channel, or all of them; returns posted ``firing`` and
    ``resolved`` counts. Safe to run twice (a channel being synced is skipped)."""
    totals = {"firing": 0, "resolved": 0}
    ids = [channel_id] if channel_id is not None else alertmanager_sync.state_channels()
    for pk in ids:
        result = alertmanager_sync.sync_channel(pk)
        totals["firing"] += result.firing
        totals["resolved"] += result.resolved
    return totals


def enqueue_sync(channel_id: int | None = None) -> bool:
    """Queue ``sync_alertmanager`` (all channels, or one) when any channel syncs state.
    A broker outage is logged; the beat runs the sync anyway. Returns True when queued."""
    if channel_id is None and not alertmanager_sync.state_channels():
        return False
    try:
        sync_alertmanager.delay(channel_id)
    except BrokerError as exc:
        log.warning("cannot queue the Alertmanager sync (the beat will): %s", exc)
        return False
    return True


#: Seconds a muting burst (a bulk acknowledge) is gathered into one Alertmanager sync.
MUTE_SYNC_DELAY_S = 2
_SYNC_SCHEDULED_KEY = "alerts:alertmanager-sync-scheduled"


def on_finding_event(sender: object = None, instance: object = None, created: bool = False,
                     **kwargs: object) -> None:
    """``post_save`` receiver of FindingEvent: an acknowledged or silenced finding ends its
    Alertmanager alert at once (one sync :data:`MUTE_SYNC_DELAY_S` after the first mute of a
    burst) rather than at the next beat."""
    from audit.models import FindingEvent

    if created and getattr(instance, "kind", "") in (FindingEvent.Kind.ACKNOWLEDGED,
                                                     FindingEvent.Kind.SILENCED):
        transaction.on_commit(schedule_sync)


def schedule_sync() -> bool:
    """Queue one sync of every Alertmanager channel :data:`MUTE_SYNC_DELAY_S` from now,
    unless one is already due. Returns True when this call queued it."""
    if not alertmanager_sync.state_channels():
        return False
    return _queue_once(_SYNC_SCHEDULED_KEY, sync_alertmanager, MUTE_SYNC_DELAY_S,
                       "cannot queue the Alertmanager sync (the beat will)")


def _queue_once(key: str, task: Task, countdown: float, failure: str) -> bool:
    """Queue ``task`` ``countdown`` seconds from now unless a run is already due (the cache
    key ``key`` marks it for that long); a broker error clears the mark, logs ``failure``
    and returns False (the periodic sweep or beat runs it instead)."""
    if not cache.add(key, 1, timeout=max(1, int(countdown))):
        return False
    try:
        task.apply_async(countdown=countdown)
    except BrokerError as exc:
        cache.delete(key)
        log.warning("%s: %s", failure, exc)
        return False
    return True


def send_test(channel_id: int) -> int:
    """Create a test delivery for channel ``channel_id`` and enqueue it after commit
    (the same path as real alerts). Returns the delivery id."""
    from alerts.models import AlertChannel

    delivery = alerts.create_test_delivery(AlertChannel.objects.get(pk=channel_id))
    transaction.on_commit(partial(enqueue_sends, [delivery.pk]))
    return delivery.pk
