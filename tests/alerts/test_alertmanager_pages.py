"""The Alertmanager channel through the Alerts pages: creating it backfills every open
finding into a real Alertmanager at once; its credentials are never rendered back and are
kept when the form leaves them empty."""

from __future__ import annotations

import pytest
from alertkit import ChannelFactory, FindingFactory
from amkit import start_alertmanager

from alerts.models import AlertChannel

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("allow_local")]


def test_creating_the_channel_in_the_page_fires_the_open_findings(
        admin_client, tmp_path, eager, django_capture_on_commit_callbacks):
    older = FindingFactory(severity="critical")  # opened long before the channel
    with start_alertmanager(tmp_path) as am:
        with django_capture_on_commit_callbacks(execute=True):
            response = admin_client.post("/alerts/channels/new/", {
                "name": "cluster alertmanager", "kind": "alertmanager",
                "destination": am.url, "min_severity": "high",
                "triggers": ["new_finding", "host_silent"], "enabled": "on"})
        assert response.status_code == 302
        [alert] = am.alerts(alertname="FleetAuditFinding")
        assert alert["labels"]["finding_id"] == str(older.code)


def test_credentials_are_write_only_in_the_form(admin_client):
    channel = ChannelFactory(kind="alertmanager", name="am", secret="",
                             destination="http://127.0.0.1:9093",
                             bearer_token="am-bearer-0123456789")
    form = admin_client.get(f"/alerts/channels/{channel.code}/").content.decode()
    assert "am-bearer-0123456789" not in form
    admin_client.post(f"/alerts/channels/{channel.code}/", {
        "name": "am", "kind": "alertmanager", "destination": "http://127.0.0.1:9093",
        "bearer_token": "", "min_severity": "high", "triggers": ["new_finding"],
        "enabled": "on"})
    assert AlertChannel.objects.get(pk=channel.pk).bearer_token == "am-bearer-0123456789"
