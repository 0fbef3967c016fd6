"""The alert pages (the admin role's alert-channel permission): channel settings,
"send test", the delivery log; secrets and Slack URLs are never shown back."""

from __future__ import annotations

import pytest
from alertkit import ChannelFactory
from django.contrib.auth.models import Permission
from django.utils import timezone

from alerts.models import AlertChannel, Delivery
from fleet.access import set_role

pytestmark = [pytest.mark.django_db, pytest.mark.urls("alerts_test_urls")]


@pytest.fixture
def admin_client(client, django_user_model):
    user = django_user_model.objects.create_user("ops", password="x")
    set_role(user, "admin")
    client.force_login(user)
    return client


def test_the_alert_pages_are_for_the_admin_role_only(client, django_user_model):
    assert client.get("/alerts/").status_code == 302  # to the login page
    client.force_login(django_user_model.objects.create_user("viewer", password="x"))
    assert client.get("/alerts/").status_code == 403
    assert client.get("/alerts/deliveries/").status_code == 403


def test_the_alert_pages_check_the_permission_the_menu_uses_not_is_staff(client,
                                                                        django_user_model):
    # Staff without the alert-channel permission sees no "Alerts" menu: no pages either.
    staff = django_user_model.objects.create_user("staff", password="x", is_staff=True)
    client.force_login(staff)
    assert client.get("/alerts/").status_code == 403
    assert client.get("/alerts/channels/new/").status_code == 403
    # The permission alone (no is_staff) opens them, as it shows the menu entry.
    holder = django_user_model.objects.create_user("holder", password="x")
    holder.user_permissions.add(Permission.objects.get(codename="change_alertchannel"))
    client.force_login(holder)
    page = client.get("/alerts/")
    assert page.status_code == 200 and 'href="/alerts/"' in page.content.decode()


def test_an_admin_creates_a_webhook_channel_with_a_generated_secret(admin_client, receiver,
                                                                    allow_local):
    response = admin_client.post("/alerts/channels/new/", {
        "name": "ops webhook", "kind": "webhook", "destination": receiver.url, "secret": "",
        "min_severity": "high", "triggers": ["risky_upgrade", "host_silent"],
        "host_labels": "env=prod, team=ml", "enabled": "on"})

    assert response.status_code == 200
    channel = AlertChannel.objects.get(name="ops webhook")
    assert len(channel.secret) >= 40
    assert channel.secret in response.content.decode()  # shown this once
    assert "no-store" in response["Cache-Control"]
    for path in ("/alerts/", f"/alerts/channels/{channel.code}/"):
        assert channel.secret not in admin_client.get(path).content.decode(), path
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


SLACK_URL = "https://hooks.slack.com/services/T0001/B0002/s3cr3tT0kenXYZW"


def test_a_slack_url_and_webhook_secret_are_masked_and_kept_on_save(admin_client, monkeypatch):
    monkeypatch.setattr("socket.getaddrinfo", lambda host, port, *a, **k: [
        (2, 1, 6, "", ("93.184.215.14", port))])  # hooks.slack.com, offline
    slack = ChannelFactory(name="team slack", kind="slack", destination=SLACK_URL)
    hook = ChannelFactory(name="hook", kind="webhook", destination="https://example.com/h",
                          secret="webhook-signing-secret-0123456789")
    listing = admin_client.get("/alerts/").content.decode()
    assert "s3cr3tT0ken" not in listing and "https://hooks.slack.com/…XYZW" in listing
    form = admin_client.get(f"/alerts/channels/{slack.code}/").content.decode()
    assert "s3cr3tT0ken" not in form
    assert "webhook-signing-secret" not in admin_client.get(
        f"/alerts/channels/{hook.code}/").content.decode()

    for channel in (slack, hook):  # saving with the fields left empty keeps both
        admin_client.post(f"/alerts/channels/{channel.code}/", {
            "name": channel.name, "kind": channel.kind, "destination": "", "secret": "",
            "min_severity": "high", "triggers": ["risky_upgrade"], "enabled": "on"})
    slack.refresh_from_db()
    hook.refresh_from_db()
    assert slack.destination == SLACK_URL
    assert hook.secret == "webhook-signing-secret-0123456789"


def test_the_alert_pages_name_triggers_in_words_not_internal_names(admin_client):
    """The channel list and the log say "Risky upgrade", never ``risky_upgrade``."""
    channel = ChannelFactory(name="ops mail", triggers=["risky_upgrade", "host_silent"])
    Delivery.objects.create(channel=channel, trigger="risky_upgrade", group_key="u",
                            message={"title": "Risky upgrade on gpu-1: 0.25.1 → 0.30.0"})

    channels = admin_client.get("/alerts/").content.decode()
    log = admin_client.get("/alerts/deliveries/").content.decode()

    assert "Risky upgrade, Host stopped reporting" in channels
    assert "<strong>Risky upgrade</strong>:" in log
    for page in (channels, log):
        assert "risky_upgrade" not in page and "host_silent" not in page
