"""Sending one delivery: claim the row, call the transport, record the attempt.

Once per (channel, event group): :func:`send` claims the row with a conditional
update (``pending`` → ``sending`` with a fresh ``claim_token``), so a task
delivered twice sends once. A worker killed after claiming leaves the row in
``sending``; the broker redelivers the task (``acks_late``) after its visibility
timeout and :func:`send` takes the claim over once it is older than
``ALERT_CLAIM_LEASE_S`` (longer than a send's hard time limit, so a live attempt
is never taken over). The take-over is logged as a ``lost`` attempt and flags the
delivery ``possible_duplicate``: only a worker killed between sending and
recording makes the receiver see the message twice, and the log shows that case.

Failures: permanent (4xx, invalid token, refused address) stop at once and mark
the channel failing; transient ones go back to ``pending`` with a backoff delay
(:func:`backoff`) until ``ALERT_MAX_ATTEMPTS``.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db.models import F, QuerySet
from django.utils import timezone

from alerts.models import AlertChannel, Delivery, DeliveryAttempt, Trigger
from alerts.transports import AlertMessage, TransportError

log = logging.getLogger(__name__)

#: Attempts before a transiently failing delivery is given up (``failed``).
DEFAULT_MAX_ATTEMPTS = 8
#: First retry delay, seconds; doubles per attempt (with jitter) up to the cap.
DEFAULT_RETRY_BASE_S = 10.0
#: Longest retry delay, seconds (also capped below the broker visibility timeout).
DEFAULT_RETRY_MAX_S = 300.0
#: A ``sending`` claim older than this (seconds) belongs to a dead worker.
DEFAULT_CLAIM_LEASE_S = 120.0
LOST_NOTE = ("the worker stopped after claiming this attempt (killed or past its time "
             "limit); if it had already sent, the receiver got this message twice")


@dataclass
class SendResult:
    """What :func:`send` did: ``status`` is sent / retry / failed / permanent / skipped;
    ``retry_in`` the delay in seconds before the next attempt (status ``retry``)."""

    status: str
    retry_in: float | None = None


def backoff(attempt: int, retry_after: float | None = None,
            ceiling_s: float | None = None) -> float:
    """Seconds to wait before attempt ``attempt + 1`` (``attempt`` >= 1).

    Capped exponential backoff with "equal jitter": half the exponential delay plus
    a random share of the other half (https://aws.amazon.com/blogs/architecture/
    exponential-backoff-and-jitter/). A receiver's ``retry_after`` is honoured when
    longer. Never above ``ALERT_RETRY_MAX_S`` nor ``ceiling_s`` (the caller passes
    half the broker visibility timeout: a countdown past it gets redelivered early).
    """
    base = float(getattr(settings, "ALERT_RETRY_BASE_S", DEFAULT_RETRY_BASE_S))
    cap = float(getattr(settings, "ALERT_RETRY_MAX_S", DEFAULT_RETRY_MAX_S))
    if ceiling_s is not None:
        cap = min(cap, ceiling_s)
    exponential = min(cap, base * 2 ** max(0, attempt - 1))
    delay = exponential / 2 + random.uniform(0, exponential / 2)
    if retry_after is not None:
        delay = max(delay, retry_after)
    return min(delay, cap)


def lease() -> timedelta:
    """``ALERT_CLAIM_LEASE_S`` as a timedelta."""
    return timedelta(seconds=float(getattr(settings, "ALERT_CLAIM_LEASE_S",
                                           DEFAULT_CLAIM_LEASE_S)))


def claim(delivery_id: int, now: datetime | None = None) -> tuple[Delivery, uuid.UUID] | None:
    """Claim a pending delivery, or take over a stale ``sending`` one.

    Returns ``(delivery, token)`` or None when the row is gone, final, or being sent
    by a live worker.
    """
    now = now or timezone.now()
    token = uuid.uuid4()
    rows = Delivery.objects.filter(pk=delivery_id)
    taken = rows.filter(status=Delivery.Status.PENDING).update(
        status=Delivery.Status.SENDING, claim_token=token, claimed_at=now,
        attempts=F("attempts") + 1)
    if not taken and not _take_over(rows, token, now):
        return None
    return Delivery.objects.select_related("channel").get(pk=delivery_id), token


def _take_over(rows: QuerySet[Delivery], token: uuid.UUID, now: datetime) -> bool:
    stale = rows.filter(status=Delivery.Status.SENDING, claimed_at__lt=now - lease())
    old = stale.values("pk", "claim_token", "attempts", "claimed_at").first()
    if old is None:
        return False
    if not stale.filter(claim_token=old["claim_token"]).update(
            claim_token=token, claimed_at=now, attempts=F("attempts") + 1,
            possible_duplicate=True):
        return False
    DeliveryAttempt.objects.create(delivery_id=old["pk"], number=old["attempts"],
                                   started_at=old["claimed_at"],
                                   outcome=DeliveryAttempt.Outcome.LOST, error=LOST_NOTE)
    log.warning("delivery %s: took over a stale claim; a duplicate is possible", old["pk"])
    return True


def send(delivery_id: int, ceiling_s: float | None = None) -> SendResult:
    """Claim and send delivery ``delivery_id`` once; record the attempt.

    ``ceiling_s`` caps the retry delay (see :func:`backoff`). Unexpected exceptions
    from a transport are recorded on the delivery, then re-raised.
    """
    claimed = claim(delivery_id)
    if claimed is None:
        return SendResult("skipped")
    delivery, token = claimed
    started, started_at = time.monotonic(), timezone.now()
    if not delivery.channel.enabled and delivery.trigger != Trigger.TEST:
        error = TransportError("the channel was disabled before this was sent", permanent=True)
        _record(delivery, token, Delivery.Status.FAILED, error, started, started_at)
        return SendResult("failed")
    try:
        message = AlertMessage.from_dict(delivery.message)
        code = delivery.channel.transport().notify(message)
    except SoftTimeLimitExceeded:
        error = TransportError("the send took longer than its time limit")
        return _failed(delivery, token, error, started, started_at, ceiling_s)
    except TransportError as exc:
        return _failed(delivery, token, exc, started, started_at, ceiling_s)
    except Exception as exc:
        error = TransportError(f"internal error: {exc!r}", permanent=True)
        _record(delivery, token, Delivery.Status.PERMANENT_FAILURE, error, started, started_at)
        raise
    _record(delivery, token, Delivery.Status.SENT, code, started, started_at)
    if delivery.channel.failing_since is not None:
        delivery.channel.clear_failing()
    return SendResult("sent")


def _failed(delivery: Delivery, token: uuid.UUID, exc: TransportError, started: float,
            started_at: datetime, ceiling_s: float | None) -> SendResult:
    max_attempts = int(getattr(settings, "ALERT_MAX_ATTEMPTS", DEFAULT_MAX_ATTEMPTS))
    if exc.permanent:
        _record(delivery, token, Delivery.Status.PERMANENT_FAILURE, exc, started, started_at)
        delivery.channel.mark_failing(f"{delivery.channel.transport().label}: {exc.message}")
        return SendResult("permanent")
    if delivery.attempts >= max_attempts:
        _record(delivery, token, Delivery.Status.FAILED, exc, started, started_at)
        return SendResult("failed")
    delay = backoff(delivery.attempts, exc.retry_after, ceiling_s)
    _record(delivery, token, Delivery.Status.PENDING, exc, started, started_at, delay)
    return SendResult("retry", delay)


def _record(delivery: Delivery, token: uuid.UUID, status: str,
            outcome: int | None | TransportError, started: float, started_at: datetime,
            retry_in: float | None = None) -> None:
    """Store one attempt's outcome on the delivery (if our claim still holds) and log it."""
    duration = int((time.monotonic() - started) * 1000)
    now = timezone.now()
    error = outcome if isinstance(outcome, TransportError) else None
    code = error.status_code if error else outcome
    text = error.message[:4000] if error else ""
    if error and retry_in is not None:
        text += f" (retry {delivery.attempts + 1} in {retry_in:.1f} s)"
    fields = {"status": status, "response_code": code, "error": text, "duration_ms": duration,
              "claim_token": None,
              "next_attempt_at": now + timedelta(seconds=retry_in) if retry_in else None}
    if status == Delivery.Status.SENT:
        fields["sent_at"] = now
    if not Delivery.objects.filter(pk=delivery.pk, claim_token=token).update(**fields):
        # Another worker took our claim over (we were presumed dead): keep its state.
        Delivery.objects.filter(pk=delivery.pk).update(possible_duplicate=True)
    DeliveryAttempt.objects.create(
        delivery=delivery, number=delivery.attempts, started_at=started_at,
        outcome=_OUTCOMES.get(status, DeliveryAttempt.Outcome.TRANSIENT),
        response_code=code, error=text, duration_ms=duration)


_OUTCOMES = {Delivery.Status.SENT: DeliveryAttempt.Outcome.SENT,
             Delivery.Status.PERMANENT_FAILURE: DeliveryAttempt.Outcome.PERMANENT,
             Delivery.Status.FAILED: DeliveryAttempt.Outcome.TRANSIENT,
             Delivery.Status.PENDING: DeliveryAttempt.Outcome.TRANSIENT}


def stragglers(now: datetime | None = None, grace: timedelta | None = None) -> list[int]:
    """Ids of deliveries whose send task was lost: pending past their retry time plus
    ``grace`` (default: the retry cap plus the lease), or ``sending`` past the lease."""
    now = now or timezone.now()
    grace = grace or lease() + timedelta(
        seconds=float(getattr(settings, "ALERT_RETRY_MAX_S", DEFAULT_RETRY_MAX_S)))
    pending = Delivery.objects.filter(status=Delivery.Status.PENDING)
    due = (pending.filter(next_attempt_at__lt=now - grace)
           | pending.filter(next_attempt_at=None, created_at__lt=now - grace)
           | Delivery.objects.filter(status=Delivery.Status.SENDING,
                                     claimed_at__lt=now - lease()))
    return list(due.order_by("id").values_list("id", flat=True)[:1000])


def channel_label(channel: AlertChannel) -> str:
    """Human label of a channel's kind (the kind itself when unregistered)."""
    try:
        return channel.transport().label
    except KeyError:
        return channel.kind
