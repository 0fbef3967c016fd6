"""Generic webhook: the alert as JSON, signed with HMAC-SHA256.

Body: :meth:`AlertMessage.as_dict` serialised with sorted keys (schema
``fleet-audit.alert/v1``). Headers:

- ``X-Fleet-Timestamp: <unix seconds>``: when this attempt was signed;
- ``X-Fleet-Delivery: <uuid>``: the delivery's code, the same on every retry, so
  a receiver can drop the one duplicate a worker lost mid-send can cause;
- ``X-Fleet-Event: <trigger>``;
- ``X-Fleet-Signature: sha256=<hex>``: HMAC-SHA256 under the channel's secret of
  ``"<timestamp>.<delivery>.<event>." + body`` (the exact body bytes), the signed-timestamp
  scheme Stripe and Slack use. A receiver recomputes it (:func:`verify`, the README's
  recipe), compares with ``hmac.compare_digest``, refuses timestamps outside its replay
  window (default :data:`REPLAY_WINDOW_S`) and remembers delivery codes inside it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Mapping

from alerts.transports import AlertMessage, Transport, register
from alerts.transports.http import post, validate_url

SIGNATURE_HEADER = "X-Fleet-Signature"
TIMESTAMP_HEADER = "X-Fleet-Timestamp"
DELIVERY_HEADER = "X-Fleet-Delivery"
EVENT_HEADER = "X-Fleet-Event"
#: Seconds a receiver accepts between the signed timestamp and its clock (5 minutes, as
#: Stripe's and Slack's signing recipes).
REPLAY_WINDOW_S = 300


def sign(secret: str, body: bytes, *, timestamp: int, delivery: str, event: str) -> str:
    """``sha256=<hex>``: HMAC-SHA256 under ``secret`` (UTF-8) of
    ``f"{timestamp}.{delivery}.{event}.".encode() + body``."""
    signed = f"{timestamp}.{delivery}.{event}.".encode() + body
    return "sha256=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def verify(secret: str, body: bytes, headers: Mapping[str, str], *,
           window_s: int = REPLAY_WINDOW_S, now: float | None = None) -> bool:
    """True when ``headers`` carry a valid signature of ``body`` signed within ``window_s``
    seconds of ``now`` (default: this clock). The receiver's side of :func:`sign`; header
    names as sent (a case-insensitive mapping is fine). Never raises on bad input."""
    try:
        timestamp = int(headers[TIMESTAMP_HEADER])
        expected = sign(secret, body, timestamp=timestamp, delivery=headers[DELIVERY_HEADER],
                        event=headers[EVENT_HEADER])
        given = headers[SIGNATURE_HEADER]
    except (KeyError, ValueError):
        return False
    current = time.time() if now is None else now
    return abs(current - timestamp) <= window_s and hmac.compare_digest(given, expected)


def encode(message: AlertMessage) -> bytes:
    """The exact bytes posted (and signed): compact JSON with sorted keys, UTF-8."""
    return json.dumps(message.as_dict(), sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False).encode()


@register
class WebhookTransport(Transport):
    """POST the alert JSON to any URL, signed with the channel's secret."""

    kind = "webhook"
    label = "Webhook (signed JSON)"
    destination_help = "URL that receives a signed JSON POST per alert."
    uses_secret = True

    @classmethod
    def validate_destination(cls, destination: str) -> str:
        """An http(s) URL to a public address (see :mod:`alerts.transports.http`)."""
        return validate_url(destination)

    def notify(self, message: AlertMessage) -> int | None:
        """POST the signed JSON; returns the HTTP status. Raises TransportError."""
        body = encode(message)
        timestamp = int(time.time())
        signature = sign(self.channel.secret, body, timestamp=timestamp,
                         delivery=message.delivery, event=message.trigger)
        headers = {"Content-Type": "application/json",
                   "User-Agent": "vllm-fleet-audit-alerts/1",
                   TIMESTAMP_HEADER: str(timestamp), DELIVERY_HEADER: message.delivery,
                   EVENT_HEADER: message.trigger, SIGNATURE_HEADER: signature}
        return post(self.channel.destination, body, headers).status_code
