"""The shipped Alertmanager example (deploy/alertmanager/alertmanager.yml) in a real
Alertmanager: with both alert paths on, one finding pages once; findings of an offline
host are inhibited by the host's alert."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from alertkit import ChannelFactory, FindingFactory, ServerFactory
from amkit import start_alertmanager
from django.utils import timezone

from alerts.alertmanager_sync import sync_channel
from alerts.transports.alertmanager import AlertmanagerTransport, postable

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("allow_local")]
EXAMPLE = Path(__file__).resolve().parents[2] / "deploy/alertmanager/alertmanager.yml"


def _rule_alert(labels: dict[str, str]) -> dict:
    """What Prometheus posts for a FleetAuditFinding rule (no ``source`` label)."""
    now = datetime.now(UTC)
    return postable(labels, {"summary": "from the rule"}, now, now + timedelta(minutes=5))


def test_both_paths_page_once_and_an_offline_host_inhibits_its_findings(tmp_path):
    server = ServerFactory(host__hostname="h100-a", host__labels={"team": "ml"})
    finding = FindingFactory(server=server, severity="critical")
    with start_alertmanager(tmp_path, config=EXAMPLE.read_text()) as am:
        channel = ChannelFactory(kind="alertmanager", destination=am.url, secret="")
        sync_channel(channel.pk)
        rule_labels = {"alertname": "FleetAuditFinding", "finding_id": str(finding.code),
                       "host": "h100-a", "server": "port:8000", "rule_id": finding.rule_id,
                       "severity": "critical", "team": "ml"}
        AlertmanagerTransport(channel).post_alerts([_rule_alert(rule_labels)])

        both = am.alerts(alertname="FleetAuditFinding", finding_id=str(finding.code))
        states = {a["labels"].get("source", "prometheus"): a["status"] for a in both}
        assert states["vllm-fleet-audit"]["state"] == "active"
        assert states["prometheus"]["state"] == "suppressed"
        assert states["prometheus"]["inhibitedBy"]

        server.host.last_seen = timezone.now() - timedelta(hours=1)
        server.host.save(update_fields=["last_seen"])
        sync_channel(channel.pk)
        [offline] = am.alerts(alertname="FleetAuditHostOffline")
        assert offline["status"]["state"] == "active"
        [pushed] = am.alerts(alertname="FleetAuditFinding", source="vllm-fleet-audit")
        assert pushed["status"]["state"] == "suppressed"  # the host's alert says it
        assert {r["name"] for r in pushed["receivers"]} == {"fleet-pager"}  # critical route
