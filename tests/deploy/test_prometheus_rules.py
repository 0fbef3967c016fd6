"""The shipped Prometheus rules in Debian's Prometheus: ``promtool`` checks and unit-tests
them (deploy/prometheus/fleet-audit-rules.test.yaml), and a real Prometheus on loopback
scrapes the dashboard's /metrics and evaluates them: an open finding's alert is pending with
its link, an acknowledged one's is not, an offline host's alert names it."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from tests.alerts.alertkit import FindingFactory, ServerFactory, free_port

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy/prometheus/fleet-audit-rules.yaml"
RULE_TESTS = ROOT / "deploy/prometheus/fleet-audit-rules.test.yaml"
TOKEN = "prom-live-token-0123456789"
INSTALL = "apt-get install -y prometheus (.ci/run installs it)"


def tool(name: str) -> str:
    """A Prometheus binary; missing is a failure naming the package, never a skip."""
    found = shutil.which(name)
    if not found:
        pytest.fail(f"{name} is not on PATH: {INSTALL}")
    return found


def test_promtool_checks_and_unit_tests_the_rules():
    subprocess.run([tool("promtool"), "check", "rules", str(RULES)], check=True,
                   capture_output=True, timeout=60)
    done = subprocess.run([tool("promtool"), "test", "rules", RULE_TESTS.name],
                          cwd=RULE_TESTS.parent, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as answer:
        return json.load(answer)


@pytest.mark.django_db(transaction=True)
def test_a_live_prometheus_scrapes_the_dashboard_and_evaluates_the_rules(live_server,
                                                                         settings, tmp_path):
    settings.PROMETHEUS_TOKEN = TOKEN
    settings.SITE_URL = "https://fleet.example.com"
    server = ServerFactory(host__hostname="h100-a", host__labels={"env": "prod", "team": "ml",
                                                                  "rack": "r7"})
    opened = FindingFactory(server=server, severity="critical")
    acked = FindingFactory(server=server, severity="critical", status="acknowledged")
    ServerFactory(host__hostname="mi300-c", host__last_seen=timezone.now() - timedelta(days=1))
    target = live_server.url.removeprefix("http://")
    (tmp_path / "prometheus.yml").write_text(json.dumps({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [{"job_name": "fleet-audit", "metrics_path": "/metrics",
                            "authorization": {"type": "Bearer", "credentials": TOKEN},
                            "static_configs": [{"targets": [target]}]}]}))
    port = free_port()
    log = (tmp_path / "prometheus.log").open("wb")
    process = subprocess.Popen([tool("prometheus"), f"--config.file={tmp_path}/prometheus.yml",
                                f"--storage.tsdb.path={tmp_path}/data",
                                f"--web.listen-address=127.0.0.1:{port}"],
                               stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}/api/v1"
    try:
        deadline, alerts = time.monotonic() + 60, []
        while time.monotonic() < deadline:
            try:
                alerts = _get(base + "/alerts")["data"]["alerts"]
            except OSError:
                alerts = []
            if {a["labels"]["alertname"] for a in alerts} >= {"FleetAuditFinding",
                                                               "FleetAuditHostOffline"}:
                break
            assert process.poll() is None, (tmp_path / "prometheus.log").read_text()[-2000:]
            time.sleep(0.5)
        up = _get(base + "/query?query=up")["data"]["result"]
        assert [r["value"][1] for r in up] == ["1"], up  # the bearer token was accepted
    finally:
        process.terminate()
        process.wait(10)
        log.close()
    findings = [a for a in alerts if a["labels"]["alertname"] == "FleetAuditFinding"]
    assert [a["labels"]["finding_id"] for a in findings] == [str(opened.code)]
    assert str(acked.code) not in json.dumps(alerts)  # muted in the dashboard: no alert
    [alert] = findings
    assert alert["state"] == "pending"  # `for: 5m` still running
    assert alert["labels"]["severity"] == "critical" and alert["labels"]["team"] == "ml"
    assert "rack" not in alert["labels"]  # only FLEET_EXPORTED_HOST_LABELS are exported
    assert alert["annotations"]["dashboard_url"] == \
        f"https://fleet.example.com/findings/{opened.code}/"
    [offline] = [a for a in alerts if a["labels"]["alertname"] == "FleetAuditHostOffline"]
    assert offline["labels"]["host"] == "mi300-c"
    assert offline["annotations"]["summary"].startswith("mi300-c ")
