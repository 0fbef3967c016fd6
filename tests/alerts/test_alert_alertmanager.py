"""The Alertmanager channel's wire side: it takes no finding events (its state is synced,
see test_alertmanager_state.py), sends its credentials, refuses bad client options."""

from __future__ import annotations

import pytest
from alertkit import ChannelFactory, FindingEventFactory, FindingFactory
from django.core.exceptions import ValidationError

from alerts.alertmanager_sync import sync_channel
from alerts.models import Delivery
from alerts.transports.alertmanager import AlertmanagerTransport

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("allow_local")]


def test_finding_events_make_no_delivery_for_an_alertmanager_channel(receiver, run_dispatch):
    am = ChannelFactory(kind="alertmanager", destination=receiver.url, secret="",
                        triggers=["new_finding", "resolved"], min_severity="high")
    hook = ChannelFactory(kind="webhook", destination=receiver.url + "/webhook",
                          triggers=["new_finding"], min_severity="high")
    FindingEventFactory(finding=FindingFactory(severity="critical"))
    assert run_dispatch() == 1
    assert not Delivery.objects.filter(channel=am).exists()
    assert Delivery.objects.filter(channel=hook).count() == 1


def test_the_bearer_token_is_sent_and_a_malformed_alert_answer_stops_the_channel(receiver):
    FindingFactory(severity="critical")
    channel = ChannelFactory(kind="alertmanager", destination=receiver.url, secret="",
                             bearer_token="am-token-1")
    sync_channel(channel.pk)
    [request] = receiver.requests
    assert request.path == "/hook/api/v2/alerts"
    assert request.headers["Authorization"] == "Bearer am-token-1"
    channel.refresh_from_db()
    assert channel.synced_at is not None and channel.sync_error == ""

    receiver.answer((400, {}, b'{"code":400,"message":"bad alert"}'))
    FindingFactory(severity="critical")
    assert "400" in sync_channel(channel.pk).error
    channel.refresh_from_db()
    assert channel.is_failing and "400" in channel.sync_error


def test_client_options_are_checked_when_the_channel_is_saved(settings):
    settings.ALERTS_ALLOW_PRIVATE_WEBHOOKS = True
    both = ChannelFactory.build(kind="alertmanager", destination="http://am:9093",
                                bearer_token="t", basic_username="u", basic_password="p")
    with pytest.raises(ValidationError, match="bearer or basic"):
        both.full_clean()
    half = ChannelFactory.build(kind="alertmanager", destination="http://am:9093",
                                tls_client_cert="-----BEGIN CERTIFICATE-----")
    with pytest.raises(ValidationError, match="needs its key"):
        half.full_clean()
    junk = ChannelFactory.build(kind="alertmanager", destination="http://am:9093",
                                tls_ca="not a certificate")
    with pytest.raises(ValidationError, match="CA bundle"):
        junk.full_clean()
    hook = ChannelFactory.build(kind="webhook", destination="http://hook:80/x",
                                bearer_token="t")
    with pytest.raises(ValidationError, match="take no bearer_token"):
        hook.full_clean()


def test_the_destination_is_the_alertmanager_base_url(settings):
    settings.ALERTS_ALLOW_PRIVATE_WEBHOOKS = True
    clean = AlertmanagerTransport.validate_destination
    assert clean("http://alertmanager.monitoring:9093/api/v2/alerts") == \
        "http://alertmanager.monitoring:9093"
    with pytest.raises(ValueError):
        clean("ftp://alertmanager:9093")


def test_an_unreachable_alertmanager_shows_on_the_alerts_page(admin_client, receiver):
    FindingFactory(severity="critical")
    channel = ChannelFactory(kind="alertmanager", destination="http://127.0.0.1:9", secret="",
                             name="cluster am")
    result = sync_channel(channel.pk)
    assert result.error and result.firing == 0
    channel.refresh_from_db()
    assert channel.synced_at is None and not channel.is_failing  # transient: retried
    page = admin_client.get("/alerts/").content.decode()
    assert "not synced yet" in page and "last sync: connection failed" in page
