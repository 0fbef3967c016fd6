"""The staff-only alert pages: channel settings, "send test", the delivery log."""

from __future__ import annotations

import pytest
from alertkit import ChannelFactory
from django.utils import timezone

from alerts.models import AlertChannel, Delivery

pytestmark = [pytest.mark.django_db, pytest.mark.urls("alerts_test_urls")]


@pytest.fixture
def admin_client(client, django_user_model):
    user = django_user_model.objects.create_user("ops", password="x", is_staff=True)
    client.force_login(user)
    return client


def test_the_alert_pages_are_for_staff_only(client, django_user_model):
    assert client.get("/alerts/").status_code == 302  # to the login page
    client.force_login(django_user_model.objects.create_user("viewer", password="x"))
    assert client.get("/alerts/").status_code == 403
    assert client.get("/alerts/deliveries/").status_code == 403


def test_an_admin_creates_a_webhook_channel_with_a_generated_secret(admin_client, receiver,
                                                                    allow_local):
    response = admin_client.post("/alerts/channels/new/", {
        "name": "ops webhook", "kind": "webhook", "destination": receiver.url, "secret": "",
        "min_severity": "high", "triggers": ["risky_upgrade", "host_silent"],
        "host_labels": "env=prod, team=ml", "enabled": "on"})

    assert response.status_code == 302
    channel = AlertChannel.objects.get(name="ops webhook")
    assert len(channel.secret) >= 40
    assert channel.triggers == ["risky_upgrade", "host_silent"]
    assert channel.host_labels == {"env": "prod", "team": "ml"}


def test_a_webhook_to_a_private_address_is_refused_in_the_form(admin_client):
    response = admin_client.post("/alerts/channels/new/", {
        "name": "sneaky", "kind": "webhook", "destination": "http://127.0.0.1:6379/",
        "min_severity": "high", "triggers": ["risky_upgrade"], "enabled": "on"})

    assert response.status_code == 200
    assert "non-public address 127.0.0.1" in response.content.decode()
    assert not AlertChannel.objects.exists()


def test_send_test_goes_through_the_delivery_path_and_shows_in_the_log(
        admin_client, receiver, allow_local, eager, django_capture_on_commit_callbacks):
    channel = ChannelFactory(kind="slack", destination=receiver.url, name="team slack",
                             failing_since=timezone.now(), failure_reason="HTTP 404: no_service")

    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post(f"/alerts/channels/{channel.code}/test/")

    assert response.status_code == 302
    [request] = receiver.requests
    assert "Test message" in request.json()["text"]
    delivery = Delivery.objects.get(channel=channel)
    assert delivery.trigger == "test" and delivery.status == Delivery.Status.SENT
    channel.refresh_from_db()
    assert channel.failing_since is None  # a successful test clears the failure
    page = admin_client.get(response["Location"]).content.decode()
    assert "team slack" in page and 'data-status="sent"' in page


def test_the_delivery_log_filters_by_channel_and_shows_errors(admin_client):
    ours = ChannelFactory(name="ours")
    theirs = ChannelFactory(name="theirs")
    Delivery.objects.create(channel=ours, trigger="new_finding", group_key="a",
                            status=Delivery.Status.PERMANENT_FAILURE, attempts=1,
                            response_code=404, error="HTTP 404: no_service",
                            message={"title": "Our alert"})
    Delivery.objects.create(channel=theirs, trigger="new_finding", group_key="b",
                            message={"title": "Their alert"})

    page = admin_client.get(f"/alerts/deliveries/?channel={ours.code}").content.decode()

    assert "Our alert" in page and "HTTP 404: no_service" in page
    assert "Their alert" not in page
    everything = admin_client.get("/alerts/deliveries/").content.decode()
    assert "Our alert" in everything and "Their alert" in everything


def test_the_channel_list_shows_why_a_channel_is_failing(admin_client):
    ChannelFactory(name="dead slack", kind="slack", failing_since=timezone.now(),
                   failure_reason="Slack (incoming webhook): HTTP 403: invalid_token")

    page = admin_client.get("/alerts/").content.decode()

    assert "dead slack" in page and "HTTP 403: invalid_token" in page
