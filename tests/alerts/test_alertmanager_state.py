"""Alertmanager channels mirror the open findings, checked in a real Alertmanager.

Each test runs Debian's Alertmanager on loopback, syncs a channel and reads what
Alertmanager holds through its own API (``GET /api/v2/alerts``, active alerts only).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from alertkit import ChannelFactory, FindingFactory, ServerFactory
from amkit import Alertmanager, start_alertmanager
from django.utils import timezone

from alerts.alertmanager_sync import sync_channel
from alerts.models import AlertChannel
from audit.models import Finding

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("allow_local")]


@pytest.fixture
def am(tmp_path: Path) -> Iterator[Alertmanager]:
    with start_alertmanager(tmp_path) as manager:
        yield manager


def _when(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _ids(alerts: list[dict[str, Any]]) -> set[str]:
    return {a["labels"]["finding_id"] for a in alerts}


def _channel(am: Alertmanager, **kw: Any) -> AlertChannel:
    return ChannelFactory(kind="alertmanager", destination=am.url, secret="", **kw)


def test_a_new_channel_fires_every_open_finding_at_its_severity_one_alert_each(am):
    now = timezone.now()
    server = ServerFactory(host__hostname="h100-a",
                           host__labels={"env": "prod", "team": "ml", "rack": "r7"})
    critical = FindingFactory(server=server, severity="critical",
                              first_seen=now - timedelta(days=3))
    high = FindingFactory(server=server, severity="high")
    lapsed = FindingFactory(server=server, severity="high", status="silenced",
                            silenced_until=now - timedelta(minutes=1))
    FindingFactory(server=server, severity="medium")
    FindingFactory(server=server, severity="critical", status="acknowledged")
    FindingFactory(server=server, severity="critical", status="silenced",
                   silenced_until=now + timedelta(hours=1))
    channel = _channel(am, min_severity="high")  # created after the findings opened

    sync_channel(channel.pk)

    alerts = am.alerts(alertname="FleetAuditFinding")
    assert _ids(alerts) == {str(critical.code), str(high.code), str(lapsed.code)}
    [first] = [a for a in alerts if a["labels"]["finding_id"] == str(critical.code)]
    assert first["labels"] == {
        "alertname": "FleetAuditFinding", "source": "vllm-fleet-audit",
        "finding_id": str(critical.code), "host": "h100-a", "server": "port:8000",
        "rule_id": critical.rule_id, "severity": "critical", "env": "prod", "team": "ml"}
    assert first["annotations"]["dashboard_url"].startswith("http")
    assert abs(_when(first["startsAt"]) - critical.first_seen) < timedelta(seconds=1)
    assert timedelta(minutes=3) < _when(first["endsAt"]) - now < timedelta(minutes=5)


def test_an_escalation_replaces_the_alert_and_closing_a_finding_resolves_it(am):
    server = ServerFactory()
    rising = FindingFactory(server=server, severity="high")
    acked = FindingFactory(server=server, severity="critical")
    resolved = FindingFactory(server=server, severity="critical")
    silenced = FindingFactory(server=server, severity="high")
    channel = _channel(am, min_severity="high")
    sync_channel(channel.pk)
    assert len(am.alerts(alertname="FleetAuditFinding")) == 4

    Finding.objects.filter(pk=rising.pk).update(severity="critical")
    acked.acknowledge(None, "known, fix scheduled")
    resolved.resolve(timezone.now())
    silenced.silence(None, timezone.now() + timedelta(hours=2), "maintenance")
    sync_channel(channel.pk)

    [alert] = am.alerts(alertname="FleetAuditFinding")
    assert alert["labels"]["finding_id"] == str(rising.code)
    assert alert["labels"]["severity"] == "critical"  # one alert, not high and critical

    Finding.objects.filter(pk=rising.pk).update(severity="medium")  # below the channel's
    sync_channel(channel.pk)
    assert am.alerts(alertname="FleetAuditFinding") == []


def test_an_open_finding_is_resent_before_its_end_and_stays_firing(am, settings):
    settings.ALERTMANAGER_RESEND_S = 1  # endsAt 4 s ahead, re-sent after 0.5 s
    finding = FindingFactory(severity="critical")
    channel = _channel(am)
    sync_channel(channel.pk)
    [alert] = am.alerts(finding_id=str(finding.code))
    first_end = _when(alert["endsAt"])
    deadline = first_end + timedelta(seconds=2)
    while timezone.now() < deadline:  # the beat's job, run by hand
        sync_channel(channel.pk)
        time.sleep(0.5)
    [alert] = am.alerts(finding_id=str(finding.code))
    assert _when(alert["endsAt"]) > first_end
    assert alert["status"]["state"] == "active"


def test_a_silent_host_fires_with_its_name_and_resolves_when_it_reports_again(am):
    server = ServerFactory(host__hostname="mi300-b",
                           host__last_seen=timezone.now() - timedelta(minutes=10))
    channel = _channel(am, min_severity="high")
    sync_channel(channel.pk)
    [alert] = am.alerts(alertname="FleetAuditHostOffline")
    assert alert["labels"]["host"] == "mi300-b" and alert["labels"]["severity"] == "high"
    assert "mi300-b" in alert["annotations"]["summary"]

    server.host.last_seen = timezone.now()
    server.host.save(update_fields=["last_seen"])
    sync_channel(channel.pk)
    assert am.alerts(alertname="FleetAuditHostOffline") == []


def test_disabling_the_channel_resolves_what_it_fired(am):
    FindingFactory(severity="critical")
    channel = _channel(am)
    sync_channel(channel.pk)
    assert am.alerts(alertname="FleetAuditFinding")
    AlertChannel.objects.filter(pk=channel.pk).update(enabled=False)
    sync_channel(channel.pk)
    assert am.alerts(alertname="FleetAuditFinding") == []


def test_the_test_alert_resolves_itself(am, settings, eager,
                                        django_capture_on_commit_callbacks):
    from alerts.alert_tasks import send_test

    settings.ALERTMANAGER_TEST_ALERT_S = 5  # room for a loaded machine between post and read
    channel = _channel(am)
    with django_capture_on_commit_callbacks(execute=True):
        send_test(channel.pk)
    [alert] = am.alerts(alertname="FleetAuditTest")
    assert alert["labels"]["channel"] == channel.name
    time.sleep(5.5)
    assert am.alerts(alertname="FleetAuditTest") == []


#: bcrypt of "fleet-test-password" (cost 4), made with Python 3.11's crypt.crypt and
#: crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=16): Alertmanager's web config takes hashes only.
PASSWORD_HASH = "$2b$04$sfJEIFoR6oQGpb8nrcBB9uHz6OFnzooYb2vtxLKUvUv1e0aTGUcsi"


def test_tls_with_a_client_certificate_and_basic_auth(tmp_path):
    import base64
    import ssl

    from amkit import self_signed

    server_cert, server_key = self_signed()
    client_cert, client_key = self_signed()
    for name, text in (("server.pem", server_cert), ("server.key", server_key),
                       ("client-ca.pem", client_cert)):
        (tmp_path / name).write_text(text)
    web = (f"tls_server_config:\n  cert_file: {tmp_path / 'server.pem'}\n"
           f"  key_file: {tmp_path / 'server.key'}\n"
           "  client_auth_type: RequireAndVerifyClientCert\n"
           f"  client_ca_file: {tmp_path / 'client-ca.pem'}\n"
           f"basic_auth_users:\n  fleet: '{PASSWORD_HASH}'\n")
    reader = ssl.create_default_context(cadata=server_cert)
    (tmp_path / "c.pem").write_text(client_cert + client_key)
    reader.load_cert_chain(tmp_path / "c.pem")
    auth = "Basic " + base64.b64encode(b"fleet:fleet-test-password").decode()
    finding = FindingFactory(severity="critical")
    with start_alertmanager(tmp_path, web, context=reader, auth=auth) as am:
        good = ChannelFactory(kind="alertmanager", destination=am.url, secret="",
                              basic_username="fleet", basic_password="fleet-test-password",
                              tls_ca=server_cert, tls_client_cert=client_cert,
                              tls_client_key=client_key)
        good.full_clean()
        assert sync_channel(good.pk).error == ""
        assert _ids(am.alerts()) == {str(finding.code)}

        wrong = ChannelFactory(kind="alertmanager", destination=am.url, secret="",
                               basic_username="fleet", basic_password="guess",
                               tls_ca=server_cert, tls_client_cert=client_cert,
                               tls_client_key=client_key)
        assert "401" in sync_channel(wrong.pk).error
        wrong.refresh_from_db()
        assert wrong.is_failing  # a refused credential stops the channel until fixed

        untrusted = ChannelFactory(kind="alertmanager", destination=am.url, secret="",
                                   basic_username="fleet",
                                   basic_password="fleet-test-password")
        assert sync_channel(untrusted.pk).error  # the system store does not know this CA


def test_many_findings_go_in_batches_and_all_fire(am, monkeypatch):
    from alerts import alertmanager_sync

    monkeypatch.setattr(alertmanager_sync, "BATCH", 2)
    findings = [FindingFactory(severity="high") for _ in range(5)]
    channel = _channel(am)
    result = sync_channel(channel.pk)
    assert result.firing == 5 and result.error == ""
    assert _ids(am.alerts(alertname="FleetAuditFinding")) == {str(f.code) for f in findings}


def test_the_beat_resends_well_before_the_alerts_end(settings):
    entry = next(e for e in settings.CELERY_BEAT_SCHEDULE.values()
                 if e["task"] == "alerts.sync_alertmanager")
    # each alert is posted with endsAt 4 intervals ahead: three missed beats still hold it
    assert entry["schedule"] == settings.ALERTMANAGER_RESEND_S
