"""Slack and webhook channels against a real local HTTP receiver."""

from __future__ import annotations

import hashlib
import hmac

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
    expected = "sha256=" + hmac.new(b"k3y", request.body, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(request.headers["X-Fleet-Signature"], expected)
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
    forged = "sha256=" + hmac.new(b"wrong", request.body, hashlib.sha256).hexdigest()
    assert request.headers["X-Fleet-Signature"] != forged


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
    assert delivery.response_code == 404 and "no_service" in delivery.error
    channel.refresh_from_db()
    assert channel.failing_since is not None and "no_service" in channel.failure_reason


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
