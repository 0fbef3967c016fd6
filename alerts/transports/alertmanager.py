"""Alertmanager: the channel kind whose alerts mirror the dashboard's state.

An Alertmanager channel is not fed finding events: :mod:`alerts.alertmanager_sync` posts
every open finding (and every silent host) it subscribes to as one alert, re-sends them
before their ``endsAt`` and resolves them when they close. This module is the wire side:
the postable alert shape and the POST itself, with the channel's auth and TLS options.

``POST <destination>/api/v2/alerts`` with a JSON array of postable alerts
(Alertmanager's OpenAPI ``postableAlerts``: ``labels``, ``annotations``, ``startsAt``,
``endsAt``, ``generatorURL``; https://github.com/prometheus/alertmanager/blob/main/api/v2/
openapi.yaml). Alertmanager answers 200 with an empty body; 400 means a malformed alert
(permanent), 401/403 a refused credential (permanent). Alertmanager identifies an alert by
its whole label set, so labels carry only what names it; text goes to annotations.

Messages that are not state go through :meth:`AlertmanagerTransport.notify` (the delivery
outbox): the channel's **test** alert, which resolves itself after
``ALERTMANAGER_TEST_ALERT_S`` (its ``endsAt``), and knowledge-base notices, held
:data:`NOTICE_HOLD_S`.

Client options (channel fields): ``bearer_token`` or ``basic_username``/``basic_password``
(``Authorization`` header; Alertmanager's ``--web.config.file`` or a proxy in front of it
checks them), ``tls_ca`` (PEM bundle trusted instead of the system's) and
``tls_client_cert``/``tls_client_key`` (PEM, for ``client_auth_type:
RequireAndVerifyClientCert``). In-cluster Alertmanagers listen on private addresses: the
SSRF guard refuses them unless ``ALERTS_ALLOW_PRIVATE_WEBHOOKS`` is true
(alerts.transports.http).
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import tempfile
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings

from alerts.transports import (
    AlertChannel,
    AlertItem,
    AlertMessage,
    Transport,
    TransportError,
    register,
)
from alerts.transports.http import post, validate_url

API_PATH = "/api/v2/alerts"
#: ``source`` label of every alert the dashboard posts (routes and inhibitions match it).
SOURCE = "vllm-fleet-audit"
#: How long a knowledge-base notice stays firing (24 h): a notice, not a state.
NOTICE_HOLD_S = 24 * 3600
#: Default life of the channel's test alert, seconds (settings ALERTMANAGER_TEST_ALERT_S).
DEFAULT_TEST_ALERT_S = 300
#: Longest label value sent (Alertmanager has no limit; receivers such as PagerDuty do).
MAX_LABEL_CHARS = 200
MAX_ANNOTATION_CHARS = 4000


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters (an ellipsis marks a cut)."""
    return text if len(text) <= limit else text[:limit - 1] + "…"


def iso(moment: datetime) -> str:
    """RFC 3339 UTC timestamp with a ``Z`` (what Alertmanager's API prints back)."""
    return moment.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def postable(labels: dict[str, str], annotations: dict[str, str], starts_at: datetime,
             ends_at: datetime, generator_url: str = "") -> dict[str, Any]:
    """One postable alert; empty labels and annotations are left out, values clipped."""
    alert: dict[str, Any] = {
        "labels": {k: clip(v, MAX_LABEL_CHARS) for k, v in labels.items() if v},
        "annotations": {k: clip(v, MAX_ANNOTATION_CHARS)
                        for k, v in annotations.items() if v},
        "startsAt": iso(min(starts_at, ends_at)), "endsAt": iso(ends_at)}
    if generator_url:
        alert["generatorURL"] = generator_url
    return alert


def _notice(item: AlertItem, message: AlertMessage, now: datetime) -> dict[str, Any]:
    """A test alert (``FleetAuditTest``, resolving itself) or a notice for one item."""
    if message.test:
        life = float(getattr(settings, "ALERTMANAGER_TEST_ALERT_S", DEFAULT_TEST_ALERT_S))
        labels = {"alertname": "FleetAuditTest", "source": SOURCE, "severity": "info",
                  "channel": message.channel, "delivery": message.delivery}
    else:
        life = NOTICE_HOLD_S
        labels = {"alertname": "FleetAuditNotice", "source": SOURCE,
                  "severity": item.severity, "trigger": message.trigger,
                  "host": item.host}
    annotations = {"summary": item.headline, "description": item.detail}
    return postable(labels, annotations, now, now + timedelta(seconds=life),
                    item.host_url or message.url)


def payload(message: AlertMessage, now: datetime | None = None) -> list[dict[str, Any]]:
    """The JSON array posted for an outbox ``message`` (a test, a KB notice)."""
    now = now or datetime.now(timezone.utc)
    items = message.items or [AlertItem(kind=message.trigger, host="", host_url="",
                                        severity=message.severity, headline=message.title,
                                        detail=message.summary)]
    return [_notice(item, message, now) for item in items]


def ssl_context(channel: AlertChannel) -> ssl.SSLContext | bool:
    """The channel's TLS settings as an SSL context, or True (system trust, no client
    certificate). Raises ``ValueError`` for a PEM that does not load."""
    if not (channel.tls_ca or channel.tls_client_cert or channel.tls_client_key):
        return True
    if bool(channel.tls_client_cert) != bool(channel.tls_client_key):
        raise ValueError("a client certificate needs its key, and a key its certificate")
    try:
        context = ssl.create_default_context(cadata=channel.tls_ca or None)
    except (ssl.SSLError, ValueError) as exc:
        raise ValueError(f"the CA bundle does not load: {exc}") from None
    if channel.tls_client_cert:
        # The ssl module loads a certificate chain from files only; written to a private
        # temporary directory and removed at once.
        with tempfile.TemporaryDirectory() as folder:
            cert, key = os.path.join(folder, "cert.pem"), os.path.join(folder, "key.pem")
            for path, text in ((cert, channel.tls_client_cert), (key, channel.tls_client_key)):
                with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as handle:
                    handle.write(text)
            try:
                context.load_cert_chain(cert, key)
            except ssl.SSLError as exc:
                raise ValueError(f"the client certificate or key does not load: {exc}") \
                    from None
    return context


def auth_headers(channel: AlertChannel) -> dict[str, str]:
    """``Authorization`` for bearer or basic auth (nothing when neither is set)."""
    if channel.bearer_token:
        return {"Authorization": f"Bearer {channel.bearer_token}"}
    if channel.basic_username:
        pair = f"{channel.basic_username}:{channel.basic_password}".encode()
        return {"Authorization": "Basic " + base64.b64encode(pair).decode()}
    return {}


@register
class AlertmanagerTransport(Transport):
    """Post alerts to an Alertmanager (API v2), with the channel's auth and TLS."""

    kind = "alertmanager"
    label = "Alertmanager (API v2)"
    destination_help = ("Alertmanager base URL, e.g. http://alertmanager.monitoring:9093 "
                        f"(alerts go to {API_PATH}).")
    client_options = True
    syncs_state = True

    @classmethod
    def validate_destination(cls, destination: str) -> str:
        """The base URL (a trailing ``/api/v2/alerts`` is accepted); public unless allowed."""
        url = validate_url(destination)
        parts = urlsplit(url)
        path = parts.path.rstrip("/")
        if path.endswith(API_PATH):
            path = path[: -len(API_PATH)]
        return urlunsplit((parts.scheme, parts.netloc, path, "", ""))

    @classmethod
    def validate_client_options(cls, channel: AlertChannel) -> None:
        """Bearer and basic auth exclude each other; TLS material must load."""
        if channel.bearer_token and (channel.basic_username or channel.basic_password):
            raise ValueError("choose bearer or basic auth, not both")
        if channel.basic_password and not channel.basic_username:
            raise ValueError("basic auth needs a user name")
        ssl_context(channel)

    def post_alerts(self, alerts: list[dict[str, Any]]) -> int:
        """POST ``alerts`` (postable alerts); returns the HTTP status. Raises
        TransportError (see :func:`alerts.transports.http.post`)."""
        body = json.dumps(alerts, separators=(",", ":"), ensure_ascii=False).encode()
        base = self.channel.destination.strip().rstrip("/")
        url = base if base.endswith(API_PATH) else base + API_PATH  # saved before validation
        headers = {"Content-Type": "application/json",
                   "User-Agent": "vllm-fleet-audit-alerts/1", **auth_headers(self.channel)}
        try:
            verify = ssl_context(self.channel)
        except ValueError as exc:
            raise TransportError(str(exc), permanent=True) from None
        return post(url, body, headers, verify=verify).status_code

    def notify(self, message: AlertMessage) -> int | None:
        """POST an outbox message (test or notice); returns the HTTP status."""
        return self.post_alerts(payload(message))
