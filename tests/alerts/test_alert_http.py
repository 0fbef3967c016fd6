"""Slack and webhook channels against a real local HTTP receiver."""

from __future__ import annotations

import hashlib
import hmac
import time

import pytest
from alertkit import (
    ChannelFactory,
    FindingEventFactory,
    FindingFactory,
    ServerFactory,
    upgrade_event,
)

from alerts.alert_sending import backoff
from alerts.models import Delivery, DeliveryAttempt
from alerts.transports.webhook import verify
from audit.models import Rule
from fleet.models import Host

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("allow_local")]


def _risky_upgrade() -> None:
    server = ServerFactory(host__hostname="gpu-node-7")
    finding = FindingFactory(server=server, rule_id="g4-stream-turn-leak", severity="critical",
                             title="Streamed <turn|> markers leak into content")
    Rule.objects.create(rule_id="g4-stream-turn-leak", title=finding.title, kind="known_issue",
                        severity="critical", fixed_in="0.28.0",
                        remediation="Upgrade to 0.28.0 or pin 0.25.1.")
    upgrade_event(server, [finding])


def test_a_webhook_receives_the_risky_upgrade_as_signed_json(receiver, run_dispatch, settings):
    channel = ChannelFactory(kind="webhook", destination=receiver.url, secret="k3y")
    _risky_upgrade()

    assert run_dispatch() == 1

    [request] = receiver.requests
    # The signed payload is "<timestamp>.<delivery>.<event>." + body (the README's recipe).
    signed = (f"{request.headers['X-Fleet-Timestamp']}.{request.headers['X-Fleet-Delivery']}."
              f"{request.headers['X-Fleet-Event']}.").encode() + request.body
    expected = "sha256=" + hmac.new(b"k3y", signed, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(request.headers["X-Fleet-Signature"], expected)
    assert abs(int(request.headers["X-Fleet-Timestamp"]) - time.time()) < 60
    body = request.json()
    assert body["schema"] == "fleet-audit.alert/v1"
    assert body["trigger"] == "risky_upgrade" and body["severity"] == "critical"
    [item] = body["items"]
    assert item["host"] == "gpu-node-7" and item["headline"] == "vLLM 0.25.1 → 0.27.0"
    [ref] = item["findings"]
    assert ref["rule_id"] == "g4-stream-turn-leak" and ref["fixed_in"] == "0.28.0"
    host = Host.objects.get(hostname="gpu-node-7")
    assert item["host_url"] == f"{settings.SITE_URL}/hosts/{host.code}/"
    delivery = Delivery.objects.get(channel=channel)
    assert request.headers["X-Fleet-Delivery"] == str(delivery.code)
    assert delivery.status == Delivery.Status.SENT and delivery.response_code == 200


def test_a_webhook_signature_does_not_verify_with_another_secret(receiver, run_dispatch):
    ChannelFactory(kind="webhook", destination=receiver.url, secret="right")
    _risky_upgrade()
    run_dispatch()
    [request] = receiver.requests
    assert verify("right", request.body, request.headers)
    assert not verify("wrong", request.body, request.headers)


def test_a_replayed_or_altered_webhook_fails_verification(receiver, run_dispatch):
    ChannelFactory(kind="webhook", destination=receiver.url, secret="k3y")
    _risky_upgrade()
    run_dispatch()
    [request] = receiver.requests
    sent_at = int(request.headers["X-Fleet-Timestamp"])
    assert verify("k3y", request.body, request.headers, now=sent_at + 299)
    assert not verify("k3y", request.body, request.headers, now=sent_at + 301)  # replayed
    for header, value in (("X-Fleet-Timestamp", str(sent_at + 3600)),
                          ("X-Fleet-Delivery", "00000000-0000-0000-0000-000000000000"),
                          ("X-Fleet-Event", "test")):
        assert not verify("k3y", request.body, {**request.headers, header: value},
                          now=sent_at), header
    assert not verify("k3y", request.body + b" ", request.headers, now=sent_at)


def test_slack_gets_a_block_kit_message_with_severity_host_findings_and_link(
        receiver, run_dispatch):
    ChannelFactory(kind="slack", destination=receiver.url)
    _risky_upgrade()

    run_dispatch()

    body = receiver.requests[0].json()
    header = body["blocks"][0]
    assert header["type"] == "header" and header["text"]["text"].startswith("CRITICAL:")
    text = "\n".join(b["text"]["text"] for b in body["blocks"] if b["type"] == "section")
    assert "gpu-node-7" in text and "`port:8000`" in text
    assert "fixed in vLLM 0.28.0" in text and "Pin vLLM 0.25.1 or upgrade to 0.28.0." in text
    assert "&lt;turn|&gt;" in text  # mrkdwn control characters are escaped
    assert "Open in vLLM Fleet Audit>" in text


def test_slack_fallback_text_cannot_ping_the_channel_or_plant_a_link(receiver, run_dispatch):
    ChannelFactory(kind="slack", destination=receiver.url)
    server = ServerFactory(host__hostname="<!channel><https://evil.example|gpu-1>")
    finding = FindingFactory(server=server, severity="critical",
                             title="<!channel> <https://evil.example|click> & more")
    upgrade_event(server, [finding])
    run_dispatch()
    body = receiver.requests[0].json()
    everything = body["text"] + "".join(
        b["text"]["text"] for b in body["blocks"] if b["type"] == "section")
    assert "<!channel>" not in everything and "<https://evil" not in everything


def test_a_receiver_failing_twice_gets_the_message_once_after_three_attempts(
        receiver, run_dispatch):
    receiver.answer((500, {}, b"boom"), (500, {}, b"boom"), (200, {}, b"ok"))
    channel = ChannelFactory(kind="webhook", destination=receiver.url)
    _risky_upgrade()

    run_dispatch()

    assert len(receiver.requests) == 3
    assert len({r.body for r in receiver.requests}) == 1  # the same message each time
    delivery = Delivery.objects.get(channel=channel)
    assert delivery.status == Delivery.Status.SENT and delivery.attempts == 3
    outcomes = list(delivery.attempt_log.values_list("outcome", "response_code"))
    assert outcomes == [("transient", 500), ("transient", 500), ("sent", 200)]
    channel.refresh_from_db()
    assert channel.failing_since is None


def test_a_dead_slack_webhook_marks_the_channel_failing_without_retrying(
        receiver, run_dispatch):
    receiver.answer((404, {}, b"no_service"))
    channel = ChannelFactory(kind="slack", destination=receiver.url)
    _risky_upgrade()

    run_dispatch()

    assert len(receiver.requests) == 1
    delivery = Delivery.objects.get(channel=channel)
    assert delivery.status == Delivery.Status.PERMANENT_FAILURE and delivery.attempts == 1
    # Only the status is stored: a failed answer's body may be an internal service's data.
    assert delivery.response_code == 404 and delivery.error == "HTTP 404"
    channel.refresh_from_db()
    assert channel.failing_since is not None and "no_service" not in channel.failure_reason


def test_a_failing_channel_gets_no_new_alerts(receiver, run_dispatch):
    receiver.answer((403, {}, b"invalid_token"))
    ChannelFactory(kind="slack", destination=receiver.url)
    _risky_upgrade()
    run_dispatch()
    finding = FindingFactory(severity="critical")
    FindingEventFactory(finding=finding)

    run_dispatch()

    assert len(receiver.requests) == 1


def test_a_webhook_to_a_private_address_is_refused_before_any_request(receiver, run_dispatch,
                                                                         settings):
    channel = ChannelFactory(kind="webhook", destination=receiver.url)
    settings.ALERTS_ALLOW_PRIVATE_WEBHOOKS = False
    _risky_upgrade()

    run_dispatch()

    assert receiver.requests == []
    delivery = Delivery.objects.get(channel=channel)
    assert delivery.status == Delivery.Status.PERMANENT_FAILURE
    assert "non-public address 127.0.0.1" in delivery.error


def test_a_429_retry_after_is_honoured_and_recorded(receiver, run_dispatch):
    receiver.answer((429, {"Retry-After": "0"}, b"slow down"), (200, {}, b"ok"))
    channel = ChannelFactory(kind="webhook", destination=receiver.url)
    _risky_upgrade()

    run_dispatch()

    delivery = Delivery.objects.get(channel=channel)
    assert delivery.status == Delivery.Status.SENT and delivery.attempts == 2
    first = delivery.attempt_log.get(number=1)
    assert first.outcome == DeliveryAttempt.Outcome.TRANSIENT and first.response_code == 429


def test_backoff_grows_is_capped_below_the_ceiling_and_honours_retry_after(settings):
    settings.ALERT_RETRY_BASE_S, settings.ALERT_RETRY_MAX_S = 10, 300
    first = [backoff(1) for _ in range(50)]
    assert all(5 <= d <= 10 for d in first)
    assert all(80 <= backoff(5) <= 160 for _ in range(50))
    assert all(backoff(12) <= 300 for _ in range(50))
    assert all(backoff(12, ceiling_s=90) <= 90 for _ in range(50))
    assert backoff(1, retry_after=120) == 120
    assert backoff(1, retry_after=10_000) == 300
    assert backoff(1, retry_after=10_000, ceiling_s=60) == 60
