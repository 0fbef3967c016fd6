"""Generic webhook: the alert as JSON, signed with HMAC-SHA256.

Body: :meth:`AlertMessage.as_dict` serialised with sorted keys (schema
``fleet-audit.alert/v1``). Headers:

- ``X-Fleet-Signature: sha256=<hex>``: HMAC-SHA256 of the exact body bytes with
  the channel's secret (the scheme GitHub webhooks use), so a receiver verifies
  with ``hmac.compare_digest``;
- ``X-Fleet-Delivery: <uuid>``: the delivery's code, the same on every retry, so
  a receiver can drop the one duplicate a worker lost mid-send can cause;
- ``X-Fleet-Event: <trigger>``.
"""

from __future__ import annotations

import hashlib
import hmac
import json

from alerts.transports import AlertMessage, Transport, register
from alerts.transports.http import post, validate_url

SIGNATURE_HEADER = "X-Fleet-Signature"


def sign(secret: str, body: bytes) -> str:
    """``sha256=<hex>`` HMAC of ``body`` (bytes) under ``secret`` (UTF-8)."""
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


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
        headers = {"Content-Type": "application/json",
                   "User-Agent": "vllm-fleet-audit-alerts/1",
                   SIGNATURE_HEADER: sign(self.channel.secret, body),
                   "X-Fleet-Delivery": message.delivery,
                   "X-Fleet-Event": message.trigger}
        return post(self.channel.destination, body, headers).status_code
