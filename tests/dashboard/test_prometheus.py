"""``GET /metrics``: Prometheus scrapes the fleet's findings, hosts, versions,
pending upgrades, evaluation lag and alert failures, behind a bearer token."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from alerts.models import AlertChannel, Delivery
from audit.models import Finding
from fleet.models import Host, Report, Server

FIXTURES = Path(__file__).resolve().parents[2] / "fleet" / "fixtures"
RULES = Path(__file__).resolve().parents[2] / "deploy/prometheus/fleet-audit-rules.yaml"
TOKEN = "prom-test-token-0123456789"


@pytest.fixture
def fleet(enrolled, post_report, settings):
    """The dashboard's sample hosts posted and evaluated; /metrics enabled."""
    from audit.evaluation import evaluate_report
    from tests.dashboard.conftest import fresh

    settings.PROMETHEUS_TOKEN = TOKEN
    for path in sorted(FIXTURES.glob("*.json")):
        sample = json.loads(path.read_text())
        _, token = enrolled(machine_id=sample["host"]["machine_id"],
                            hostname=sample["host"]["hostname"])
        body = fresh(sample)
        assert post_report(body, token=token).status_code == 202
        evaluate_report(body["report_id"])
    assert Finding.objects.active().exists()


def scrape(client) -> dict[str, list]:
    answer = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert answer.status_code == 200
    assert answer["Content-Type"].startswith("text/plain; version=")
    families = text_string_to_metric_families(answer.content.decode())
    return {f.name: f.samples for f in families}


def test_unset_token_hides_the_page_and_a_wrong_token_is_refused(client, settings, db):
    settings.PROMETHEUS_TOKEN = None
    assert client.get("/metrics", headers={"Authorization": "Bearer x"}).status_code == 404
    settings.PROMETHEUS_TOKEN = TOKEN
    assert client.get("/metrics").status_code == 401
    wrong = client.get("/metrics", headers={"Authorization": "Bearer not-the-token"})
    assert wrong.status_code == 401 and wrong["WWW-Authenticate"].startswith("Bearer")
    assert client.post("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}
                       ).status_code == 405  # read-only


def test_open_findings_are_exported_per_host_server_rule_severity_and_kind(client, fleet):
    samples = scrape(client)
    got = {(s.labels["host"], s.labels["server"], s.labels["rule_id"], s.labels["severity"],
            s.labels["kind"]): s.value for s in samples["fleet_audit_open_findings"]}
    want = {(f.host.hostname, f.server.identity, f.rule_id, f.severity, f.kind): 1.0
            for f in Finding.objects.active().select_related("host", "server")}
    assert got == want
    totals = {s.labels["severity"]: s.value
              for s in samples["fleet_audit_open_findings_by_severity"]}
    assert sum(totals.values()) == Finding.objects.active().count()
    (dropped,) = samples["fleet_audit_open_findings_series_dropped"]
    assert dropped.value == 0


def test_a_resolved_finding_leaves_the_exposition(client, fleet):
    finding = Finding.objects.active().first()
    before = scrape(client)["fleet_audit_open_findings"]
    finding.resolve(timezone.now())
    after = scrape(client)["fleet_audit_open_findings"]
    assert sum(s.value for s in after) == sum(s.value for s in before) - 1
    assert not [s for s in after if s.labels["rule_id"] == finding.rule_id
                and s.labels["host"] == finding.host.hostname
                and s.labels["server"] == finding.server.identity]


def test_hosts_versions_pending_upgrades_lag_and_alert_failures(client, fleet):
    Host.objects.filter(pk=Host.objects.first().pk).update(
        last_seen=timezone.now() - timedelta(days=1))
    server = Server.objects.filter(is_running=True).exclude(vllm_version="").first()
    Server.objects.filter(pk=server.pk).update(installed_vllm_version="99.0.0")
    Report.objects.filter(pk=Report.objects.first().pk).update(
        evaluated_at=None, received_at=timezone.now() - timedelta(minutes=20))
    channel = AlertChannel.objects.create(kind="webhook", name="ops",
                                          destination="https://hooks.example.com/x",
                                          failing_since=timezone.now())
    Delivery.objects.create(channel=channel, trigger="opened", group_key="g1",
                            status=Delivery.Status.PERMANENT_FAILURE)
    samples = scrape(client)
    hosts = {s.labels["status"]: s.value for s in samples["fleet_audit_hosts"]}
    assert hosts["offline"] == 1 and sum(hosts.values()) == Host.objects.count()
    versions = {s.labels["vllm_version"]: s.value for s in samples["fleet_audit_servers"]}
    assert versions[server.vllm_version] >= 1
    assert sum(versions.values()) == Server.objects.filter(is_running=True).count()
    (pending,) = samples["fleet_audit_pending_upgrades"]
    assert pending.value >= 1
    (lag,) = samples["fleet_audit_evaluation_lag_seconds"]
    assert 20 * 60 <= lag.value < 21 * 60
    failures = {s.labels["status"]: s.value for s in samples["fleet_audit_alert_deliveries"]}
    assert failures["permanent_failure"] == 1 and failures["failed"] == 0
    (failing,) = samples["fleet_audit_alert_channels_failing"]
    assert failing.value == 1


def test_the_example_alert_rules_only_use_exported_metrics(client, fleet):
    exported = set(scrape(client))
    rules = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    assert rules and all(r["alert"] and r["expr"] for r in rules)
    for rule in rules:
        names = set(re.findall(r"\b(fleet_audit_[a-z_]+)", rule["expr"]))
        assert names <= exported, (rule["alert"], names - exported)
        assert names or "up{" in rule["expr"]


def test_the_finding_series_are_capped_worst_first_with_exact_totals(client, fleet,
                                                                      monkeypatch):
    from front import prometheus

    active = Finding.objects.active()
    total = active.count()
    assert total > 2
    worst = active.order_by("severity").first()
    Finding.objects.filter(pk=worst.pk).update(severity="critical")
    monkeypatch.setattr(prometheus, "MAX_FINDING_SERIES", 2)
    samples = scrape(client)
    kept = samples["fleet_audit_open_findings"]
    assert sum(s.value for s in kept) == 2
    assert any(s.labels["severity"] == "critical" for s in kept)  # the worst is never dropped
    (dropped,) = samples["fleet_audit_open_findings_series_dropped"]
    assert dropped.value == total - 2
    totals = samples["fleet_audit_open_findings_by_severity"]
    assert sum(s.value for s in totals) == total


def test_muted_findings_carry_their_status_and_hosts_their_exported_labels(client, fleet):
    active = list(Finding.objects.active().order_by("pk")[:3])
    acked, silenced, lapsed = active
    acked.acknowledge(None, "known")
    silenced.silence(None, timezone.now() + timedelta(hours=1), "maintenance")
    Finding.objects.filter(pk=lapsed.pk).update(
        status="silenced", silenced_until=timezone.now() - timedelta(minutes=1))
    Host.objects.filter(pk=acked.host_id).update(
        labels={"env": "prod", "team": "ml", "rack": "r7"})
    samples = scrape(client)
    status = {s.labels["finding_id"]: s.labels["status"]
              for s in samples["fleet_audit_open_findings"]}
    assert status[str(acked.code)] == "acknowledged"
    assert status[str(silenced.code)] == "silenced"
    assert status[str(lapsed.code)] == "open"  # the silence ran out: it alerts again
    [row] = [s for s in samples["fleet_audit_open_findings"]
             if s.labels["finding_id"] == str(acked.code)]
    assert row.labels["env"] == "prod" and row.labels["team"] == "ml"
    assert "rack" not in row.labels  # only FLEET_EXPORTED_HOST_LABELS: bounded


def test_each_offline_host_is_named_with_the_site_url(client, fleet, settings):
    settings.SITE_URL = "https://fleet.example.com"
    host = Host.objects.order_by("pk").first()
    Host.objects.filter(pk=host.pk).update(last_seen=timezone.now() - timedelta(days=1))
    samples = scrape(client)
    assert [s.labels["host"] for s in samples["fleet_audit_host_offline"]] == [host.hostname]
    (site,) = samples["fleet_audit_site_info"]
    assert site.labels["url"] == "https://fleet.example.com"


def test_the_age_of_each_alertmanager_sync_is_exported(client, db, settings):
    settings.PROMETHEUS_TOKEN = TOKEN
    now = timezone.now()
    AlertChannel.objects.create(kind="alertmanager", name="am-ok",
                                destination="http://am:9093", synced_at=now)
    AlertChannel.objects.create(kind="alertmanager", name="am-stuck",
                                destination="http://am:9093",
                                synced_at=now - timedelta(minutes=30))
    AlertChannel.objects.create(kind="alertmanager", name="am-off", enabled=False,
                                destination="http://am:9093")
    ages = {s.labels["channel"]: s.value
            for s in scrape(client)["fleet_audit_alertmanager_sync_age_seconds"]}
    assert set(ages) == {"am-ok", "am-stuck"}  # a disabled channel owes no sync
    assert ages["am-ok"] < 60 and 30 * 60 <= ages["am-stuck"] < 31 * 60
