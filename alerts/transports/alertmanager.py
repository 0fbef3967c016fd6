"""Alertmanager: each alert item posted to Alertmanager's API as one alert (issue 18), so a
team routes findings through its existing routes, silences, inhibitions and receivers.

``POST <destination>/api/v2/alerts`` with a JSON array of postable alerts
(Alertmanager's OpenAPI ``postableAlerts``: ``labels``, ``annotations``, ``startsAt``,
``endsAt``, ``generatorURL``; https://github.com/prometheus/alertmanager/blob/main/api/v2/
openapi.yaml). Alertmanager answers 200 with an empty body; 400 means a malformed alert
(permanent). Labels identify the alert (Alertmanager deduplicates on the label set), so they
carry the host, server and rule, never free text; the text goes to annotations. A resolved
finding is sent with ``endsAt`` now, which resolves the same label set. An alert stays firing
in Alertmanager until its ``endsAt``: open ones are sent with ``endsAt`` :data:`HOLD_S` ahead
(Alertmanager's own default ``resolve_timeout`` is 5 minutes), and the dashboard sends a
finding again while it stays open only when its channel's triggers fire again.

In-cluster Alertmanagers listen on private addresses: the SSRF guard refuses them unless
``ALERTS_ALLOW_PRIVATE_WEBHOOKS`` is true (alerts.transports.http).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from alerts.transports import AlertItem, AlertMessage, Transport, register
from alerts.transports.http import post, validate_url

API_PATH = "/api/v2/alerts"
#: How long an open finding stays firing in Alertmanager without being sent again (24 h).
HOLD_S = 24 * 3600
#: Longest label value sent (Alertmanager has no limit; receivers such as PagerDuty do).
MAX_LABEL_CHARS = 200
MAX_ANNOTATION_CHARS = 4000


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def alert_for(item: AlertItem, message: AlertMessage, now: datetime) -> dict[str, Any]:
    """One postable alert for one item (see the module docstring for the label scheme)."""
    finding = item.findings[0] if item.findings else None
    # Only what identifies the alert: the trigger and event kind differ between the opening
    # and the resolution of one finding, so they are annotations.
    labels = {"alertname": "VllmFleetAudit", "source": "vllm-fleet-audit",
              "severity": item.severity, "host": item.host, "server": item.server,
              "rule_id": finding.rule_id if finding else ""}
    annotations = {"summary": item.headline, "description": item.detail,
                   "trigger": message.trigger, "event": item.kind,
                   "remediation": finding.remediation if finding else "",
                   "fixed_in": finding.fixed_in if finding else "",
                   "reference": finding.url if finding else ""}
    started = _parse(item.at) or _parse(message.created_at) or now
    resolved = message.trigger == "resolved"
    return {
        "labels": {k: _clip(v, MAX_LABEL_CHARS) for k, v in labels.items() if v},
        "annotations": {k: _clip(v, MAX_ANNOTATION_CHARS) for k, v in annotations.items() if v},
        "startsAt": _iso(min(started, now)),
        "endsAt": _iso(now if resolved else now + timedelta(seconds=HOLD_S)),
        "generatorURL": item.host_url or message.url,
    }


def _parse(text: str) -> datetime | None:
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None
    except ValueError:
        return None
    return value if value is None or value.tzinfo else value.replace(tzinfo=timezone.utc)


def payload(message: AlertMessage, now: datetime | None = None) -> list[dict[str, Any]]:
    """The JSON array posted for ``message`` (a test message is one ``test`` alert)."""
    now = now or datetime.now(timezone.utc)
    items = message.items or [AlertItem(kind=message.trigger, host="", host_url="",
                                        severity=message.severity, headline=message.title,
                                        detail=message.summary)]
    return [alert_for(item, message, now) for item in items]


@register
class AlertmanagerTransport(Transport):
    """Post the alert items to an Alertmanager (API v2)."""

    kind = "alertmanager"
    label = "Alertmanager (API v2)"
    destination_help = ("Alertmanager base URL, e.g. http://alertmanager.monitoring:9093 "
                        f"(alerts go to {API_PATH}).")

    @classmethod
    def validate_destination(cls, destination: str) -> str:
        """The base URL (a trailing ``/api/v2/alerts`` is accepted); public unless allowed."""
        url = validate_url(destination)
        parts = urlsplit(url)
        path = parts.path.rstrip("/")
        if path.endswith(API_PATH):
            path = path[: -len(API_PATH)]
        return urlunsplit((parts.scheme, parts.netloc, path, "", ""))

    def notify(self, message: AlertMessage) -> int | None:
        """POST the alerts; returns the HTTP status. Raises TransportError."""
        body = json.dumps(payload(message), separators=(",", ":"),
                          ensure_ascii=False).encode()
        base = self.channel.destination.strip().rstrip("/")
        url = base if base.endswith(API_PATH) else base + API_PATH  # saved before validation
        headers = {"Content-Type": "application/json",
                   "User-Agent": "vllm-fleet-audit-alerts/1"}
        return post(url, body, headers).status_code
