"""Email channel against a real in-process SMTP server (aiosmtpd)."""

from __future__ import annotations

import pytest
from alertkit import ChannelFactory, FindingFactory, ServerFactory, upgrade_event

from alerts.models import Delivery
from audit.models import Rule

pytestmark = pytest.mark.django_db


def test_a_risky_upgrade_email_has_subject_text_and_html_parts_with_links(smtp, run_dispatch,
                                                                          settings):
    settings.SITE_URL = "https://fleet.example.com"
    ChannelFactory(kind="email", destination="oncall@example.com, lead@example.com",
                   secret="")
    server = ServerFactory(host__hostname="gpu-node-3")
    finding = FindingFactory(server=server, rule_id="g4-mtp-acceptance", severity="high",
                             title="MTP acceptance collapses on 0.27.0")
    Rule.objects.create(rule_id="g4-mtp-acceptance", title=finding.title, kind="known_issue",
                        severity="high", fixed_in="0.28.0")
    upgrade_event(server, [finding])

    run_dispatch()

    [mail] = smtp.messages
    assert smtp.recipients == [["oncall@example.com", "lead@example.com"]]
    assert mail["Subject"].strip() == ("[vLLM Fleet Audit] HIGH: Risky upgrade on gpu-node-3: "
                               "vLLM 0.25.1 → 0.27.0")
    text = mail.get_body(("plain",)).get_content()
    html = mail.get_body(("html",)).get_content()
    host_link = f"https://fleet.example.com/hosts/{server.host.code}/"
    for part in (text, html):
        assert "MTP acceptance collapses on 0.27.0" in part
        assert "Fixed in vLLM 0.28.0." in part
        assert host_link in part
    assert f'<a href="{host_link}">gpu-node-3</a>' in html
    assert Delivery.objects.get().status == Delivery.Status.SENT


def test_an_unreachable_smtp_server_is_retried_then_given_up(smtp, run_dispatch, settings):
    settings.EMAIL_PORT = 9  # nothing listens: connection refused is transient
    channel = ChannelFactory(kind="email", destination="oncall@example.com", secret="")
    server = ServerFactory()
    upgrade_event(server, [FindingFactory(server=server)])
    settings.ALERT_MAX_ATTEMPTS = 2

    run_dispatch()

    delivery = Delivery.objects.get(channel=channel)
    assert delivery.status == Delivery.Status.FAILED and delivery.attempts == 2
    assert "SMTP connection failed" in delivery.error
    assert smtp.messages == []
    channel.refresh_from_db()
    assert channel.failing_since is None  # an outage is not a broken channel


def test_a_refused_recipient_fails_the_channel_permanently(smtp, run_dispatch):
    smtp.reject.add("nobody@example.com")
    channel = ChannelFactory(kind="email", destination="nobody@example.com", secret="")
    server = ServerFactory()
    upgrade_event(server, [FindingFactory(server=server)])

    run_dispatch()

    delivery = Delivery.objects.get(channel=channel)
    assert delivery.status == Delivery.Status.PERMANENT_FAILURE and delivery.attempts == 1
    assert delivery.response_code == 550
    channel.refresh_from_db()
    assert "recipients refused" in channel.failure_reason
