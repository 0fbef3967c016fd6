"""The Alertmanager channel (issue 18): findings posted to Alertmanager's API v2 as alerts
whose labels identify host, server and rule, so Alertmanager's routes and silences apply."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from alertkit import ChannelFactory, FindingEventFactory, FindingFactory, ServerFactory

from alerts.models import Delivery
from alerts.transports.alertmanager import AlertmanagerTransport
from audit.models import FindingEvent

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("allow_local")]


def _when(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_a_new_finding_fires_and_its_resolution_resolves_the_same_alert(receiver,
                                                                        run_dispatch):
    ChannelFactory(kind="alertmanager", destination=receiver.url + "/api/v2/alerts/",
                   triggers=["new_finding", "resolved"], min_severity="high")
    server = ServerFactory(host__hostname="mi300-node-1", identity="port:8000")
    finding = FindingFactory(server=server, rule_id="upx-rocm-cdna-aiter-off",
                             severity="critical", title="MI300 without AITER")
    FindingEventFactory(finding=finding)
    assert run_dispatch() == 1
    [opened] = receiver.requests
    assert opened.path == "/hook/api/v2/alerts"  # the base URL is kept, the API path added
    [alert] = opened.json()
    assert alert["labels"] == {"alertname": "VllmFleetAudit", "source": "vllm-fleet-audit",
                               "severity": "critical", "host": "mi300-node-1",
                               "server": "port:8000", "rule_id": "upx-rocm-cdna-aiter-off"}
    assert alert["annotations"]["summary"] and alert["annotations"]["trigger"] == "new_finding"
    assert _when(alert["endsAt"]) - _when(alert["startsAt"]) >= timedelta(hours=23)
    assert alert["generatorURL"].startswith("http")

    FindingEventFactory(finding=finding, kind=FindingEvent.Kind.RESOLVED)
    run_dispatch()
    [resolved] = receiver.requests[1].json()
    assert resolved["labels"] == alert["labels"]  # Alertmanager resolves by label set
    assert _when(resolved["endsAt"]) <= _when(resolved["startsAt"]) + timedelta(days=1)
    assert _when(resolved["endsAt"]) < _when(alert["endsAt"])


def test_a_malformed_alert_answer_is_a_permanent_failure(receiver, run_dispatch):
    receiver.answer((400, {}, b'{"code":400,"message":"bad alert"}'))
    channel = ChannelFactory(kind="alertmanager", destination=receiver.url,
                             triggers=["new_finding"], min_severity="high")
    FindingEventFactory(finding=FindingFactory(severity="critical"))
    run_dispatch()
    assert Delivery.objects.get(channel=channel).status == Delivery.Status.PERMANENT_FAILURE


def test_the_destination_is_the_alertmanager_base_url(settings):
    settings.ALERTS_ALLOW_PRIVATE_WEBHOOKS = True
    clean = AlertmanagerTransport.validate_destination
    assert clean("http://alertmanager.monitoring:9093/api/v2/alerts") == \
        "http://alertmanager.monitoring:9093"
    with pytest.raises(ValueError):
        clean("ftp://alertmanager:9093")
