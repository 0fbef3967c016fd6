"""Slack incoming webhook: a Block Kit message built in :meth:`SlackTransport.payload`.

Slack answers 200 ``ok``; ``404 no_service``/``channel_not_found``, ``403
invalid_token``/``action_prohibited`` and ``410 channel_is_archived`` mean the
webhook is dead (permanent), ``429`` and ``5xx`` are worth a retry
(https://api.slack.com/messaging/webhooks#handling_errors).
Block Kit limits honoured here: 50 blocks per message, 150 characters per header,
3000 per section text (https://api.slack.com/reference/block-kit/blocks).
"""

from __future__ import annotations

import json
from typing import Any

from alerts.transports import AlertItem, AlertMessage, Transport, register
from alerts.transports.http import post, validate_url

#: Hosts listed one by one; the rest are counted (a fleet upgrade lists 200 hosts).
MAX_ITEMS = 15
#: Block Kit limits: section text 3000 characters, header text 150
#: (https://api.slack.com/reference/block-kit/blocks).
MAX_SECTION_CHARS = 3000
MAX_HEADER_CHARS = 150
SEVERITY_ICON = {"critical": ":red_circle:", "high": ":large_orange_circle:",
                 "medium": ":large_yellow_circle:", "low": ":white_circle:",
                 "info": ":information_source:"}


def escape(text: str) -> str:
    """Escape the three characters Slack mrkdwn treats as control characters."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _section(text: str) -> dict[str, Any]:
    if len(text) > MAX_SECTION_CHARS:
        text = text[:MAX_SECTION_CHARS - 1] + "…"
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


def _item_text(item: AlertItem) -> str:
    where = f"<{item.host_url}|{escape(item.host)}>" if item.host_url else escape(item.host)
    server = f" `{escape(item.server)}`" if item.server else ""
    line = f"{SEVERITY_ICON.get(item.severity, '')} *{where}*{server}: {escape(item.headline)}"
    if item.detail:
        line += f"\n{escape(item.detail)}"
    return line


@register
class SlackTransport(Transport):
    """Post to a Slack incoming webhook (or a Slack-compatible one)."""

    kind = "slack"
    label = "Slack (incoming webhook)"
    destination_help = "Incoming webhook URL, https://hooks.slack.com/services/…"

    @classmethod
    def validate_destination(cls, destination: str) -> str:
        """An http(s) URL to a public address (see :mod:`alerts.transports.http`)."""
        return validate_url(destination)

    def payload(self, message: AlertMessage) -> dict[str, Any]:
        """The Block Kit body: header, summary, hosts, top findings with fixes, link."""
        icon = SEVERITY_ICON.get(message.severity, "")
        header = f"{message.severity.upper()}: {message.title}"[:MAX_HEADER_CHARS]
        blocks: list[dict[str, Any]] = [
            {"type": "header", "text": {"type": "plain_text", "text": header}},
            _section(f"{icon} {escape(message.summary)}"),
        ]
        blocks += [_section(_item_text(item)) for item in message.items[:MAX_ITEMS]]
        if len(message.items) > MAX_ITEMS:
            more = len(message.items) - MAX_ITEMS
            blocks.append({"type": "context", "elements": [{
                "type": "mrkdwn", "text": f"…and {more} more; full list in the dashboard"}]})
        blocks += self._findings_blocks(message)
        if message.url:
            blocks.append(_section(f"<{message.url}|Open in vLLM Fleet Audit>"))
        # The fallback text is mrkdwn too (notifications, old clients): escape it like the
        # blocks so a hostname cannot plant <!channel> or a <https://evil|link>.
        return {"text": escape(f"{message.severity.upper()}: {message.title}"),
                "blocks": blocks[:50]}

    def _findings_blocks(self, message: AlertMessage) -> list[dict[str, Any]]:
        refs = message.top_findings()
        if not refs:
            return []
        lines = []
        for ref in refs:
            fixed = f" (fixed in vLLM {escape(ref.fixed_in)})" if ref.fixed_in else ""
            title = f"<{ref.url}|{escape(ref.title)}>" if ref.url else escape(ref.title)
            fix = f"\n    _Fix:_ {escape(ref.remediation[:400])}" if ref.remediation else ""
            lines.append(f"• *{ref.severity}* {title}{fixed}{fix}")
        return [{"type": "divider"}, _section("*Findings*\n" + "\n".join(lines))]

    def notify(self, message: AlertMessage) -> int | None:
        """POST the Block Kit payload; returns the HTTP status. Raises TransportError."""
        body = json.dumps(self.payload(message)).encode()
        headers = {"Content-Type": "application/json",
                   "User-Agent": "vllm-fleet-audit-alerts/1"}
        return post(self.channel.destination, body, headers).status_code
