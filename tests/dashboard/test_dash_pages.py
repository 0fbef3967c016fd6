"""What the overview, host, findings, knowledge-base and versions pages show."""

from __future__ import annotations

import csv
import io
import json
import re
from datetime import timedelta

import pytest
from django.utils import timezone

from audit.models import Finding, FindingEvent
from audit.rulebook import current_knowledge_base
from bench import fleetgen
from fleet.models import Host, MetricSample, Server

pytestmark = pytest.mark.django_db


def chart_data(page: str) -> dict:
    blob = re.search(r'<script id="chart-data" type="application/json">(.*?)</script>', page,
                     re.S).group(1)
    return json.loads(blob)


def overview_queries(client, django_assert_max_num_queries, limit: int) -> int:
    from django.core.cache import cache

    cache.clear()  # the filter drop-downs are cached: count a cold page both times
    with django_assert_max_num_queries(limit) as captured:
        assert client.get("/").status_code == 200
    return len(captured)


def test_the_overview_query_count_does_not_grow_with_the_fleet(
        client, role_user, django_assert_max_num_queries):
    client.force_login(role_user("viewer"))
    fleetgen.generate(hosts=20, spark_hosts=20)
    small = overview_queries(client, django_assert_max_num_queries, 25)
    fleetgen.generate(hosts=200, spark_hosts=200)
    large = overview_queries(client, django_assert_max_num_queries, 25)
    assert Host.objects.count() == 200
    # Worst-first paging reads severity levels until the page is full: a bigger fleet
    # fills page 1 sooner, so it may need fewer queries, never more.
    assert large <= small


def test_the_overview_counts_hosts_by_status_findings_risk_and_pending_upgrades(
        client, demo_fleet, role_user):
    stale, offline, fresh = demo_fleet["hosts"]
    Host.objects.filter(pk=stale.pk).update(last_seen=timezone.now() - timedelta(minutes=3))
    Host.objects.filter(pk=offline.pk).update(last_seen=timezone.now() - timedelta(hours=2))
    Server.objects.filter(host=fresh).update(installed_vllm_version="0.30.0")
    client.force_login(role_user("viewer"))
    page = client.get("/").content.decode()
    count = {k: int(v) for k, v in re.findall(r'data-count="([\w-]+)">(\d+)<', page)}
    risky = (Finding.objects.active().filter(kind__in=("known_issue", "ceiling"),
                                             severity__in=("high", "critical"))
             .values("server_id").distinct().count())
    # "cannot check" notes are missing data, counted apart from the open findings
    gaps = [f for f in Finding.objects.active() if (f.evidence or {}).get("cannot_check")]
    assert count == {"hosts": 3, "reporting": 1, "stale": 1, "offline": 1,
                     "open": Finding.objects.active().count() - len(gaps),
                     "cannot-check": len(gaps), "risky": risky,
                     "pending": Server.objects.filter(host=fresh, is_running=True).count()}
    assert risky > 0 and gaps


def test_the_overview_filters_by_severity_version_model_gpu_label_and_search(
        client, demo_fleet, role_user):
    light, push, rtx = demo_fleet["hosts"]
    Host.objects.filter(pk=push.pk).update(labels={"env": "prod"})
    client.force_login(role_user("viewer"))

    def shown(**params: str) -> set[str]:
        page = client.get("/", params).content.decode()
        return set(re.findall(r'<tr data-host="([^"]+)"', page))

    assert shown() == {light.hostname, push.hostname, rtx.hostname}
    assert shown(version="0.29.0") == {push.hostname}
    assert shown(gpu="RTX 5090") == {rtx.hostname}
    assert shown(label="env=prod") == {push.hostname}
    assert shown(q="light") == {light.hostname}
    assert shown(model="no-such-model") == set()
    with_critical = set(Finding.objects.active().filter(severity="high")
                        .values_list("host__hostname", flat=True))
    assert shown(severity="high") == with_critical


def test_the_overview_sorts_worst_first_by_default(client, demo_fleet, role_user):
    client.force_login(role_user("viewer"))
    Finding.objects.filter(host=demo_fleet["hosts"][2]).update(severity="critical")
    page = client.get("/").content.decode()
    assert re.findall(r'<tr data-host="([^"]+)"', page)[0] == demo_fleet["hosts"][2].hostname
    by_name = client.get("/", {"sort": "host"}).content.decode()
    names = re.findall(r'<tr data-host="([^"]+)"', by_name)
    assert names == sorted(names)


def test_a_banner_names_hosts_that_moved_onto_a_risky_version(client, demo_fleet, role_user):
    host = demo_fleet["hosts"][1]
    server = host.servers.first()
    client.force_login(role_user("viewer"))
    assert "Moved onto a risky version" not in client.get("/").content.decode()
    FindingEvent.objects.create(
        kind=FindingEvent.Kind.VERSION_CHANGED, host=host, server=server,
        payload={"old": "0.25.1", "new": "0.29.0", "resolved": [], "opened": [
            {"rule_id": "gemma4-version-ceiling", "severity": "high", "title": "Ceiling"}]})
    page = client.get("/").content.decode()
    assert "Moved onto a risky version" in page and "0.29.0" in page
    assert host.hostname in page.split("Moved onto a risky version")[1].split("</div>")[0]


def test_agent_supplied_strings_are_escaped_on_every_page(client, demo_fleet, role_user):
    evil = "<img src=x onerror=alert(1)>"
    host = demo_fleet["hosts"][0]
    Host.objects.filter(pk=host.pk).update(hostname=evil, labels={"team": evil})
    Server.objects.filter(host=host).update(model_ids=[evil], argv=["vllm", "serve", evil])
    client.force_login(role_user("admin"))
    for path in ("/", f"/hosts/{host.code}/", "/findings/", "/versions/", "/settings/"):
        page = client.get(path).content.decode()
        assert evil not in page, path
    assert "&lt;img src=x onerror=alert(1)&gt;" in client.get("/").content.decode()


def test_the_host_page_shows_flags_with_defaults_and_sources(client, demo_fleet, role_user):
    host = demo_fleet["hosts"][1]  # PUSH recipe: TP=2, max-model-len 262144 on argv
    client.force_login(role_user("viewer"))
    page = client.get(f"/hosts/{host.code}/").content.decode()
    row = re.search(r"<td>tensor_parallel_size</td><td class=\"val\"><code>(.*?)</code></td>"
                    r"<td><code>(.*?)</code></td><td class=\"small\">(.*?)</td>", page)
    assert row.groups() == ("2", "1", "argv")
    assert "gpu_memory_utilization" in page and "default" in page
    assert "<strong>default</strong>: default (" in page  # source kind of defaulted flags
    assert "rules and defaults of" in page  # the release table the version maps to
    assert "<strong>frozen</strong>" in page  # the quant's frozen bundled template


def test_the_host_page_ships_downsampled_series_with_gaps_and_says_what_is_missing(
        client, demo_fleet, role_user):
    host = demo_fleet["hosts"][0]
    # Keep only the generated history, whose exposition lacks TTFT.
    MetricSample.objects.filter(server__host=host).exclude(extra__has_key="generated").delete()
    client.force_login(role_user("viewer"))
    for window in ("1h", "24h", "7d"):
        data = chart_data(client.get(f"/hosts/{host.code}/", {"window": window})
                          .content.decode())
        for chart in data["charts"]:
            for dataset in chart["datasets"]:
                assert len(dataset["data"]) <= 300, (window, chart["id"])
    data = chart_data(client.get(f"/hosts/{host.code}/", {"window": "24h"}).content.decode())
    kv = next(c for c in data["charts"] if c["id"].endswith("-kv"))
    values = [p[1] for p in kv["datasets"][0]["data"]]
    assert sum(v is not None for v in values) > 50 and values[0] is not None
    first, last = values.index(None), len(values) - 1 - values[::-1].index(None)
    assert first == last and values[first - 1] is not None and values[first + 1] is not None
    ttft = next(c for c in data["charts"] if c["id"].endswith("-ttft"))
    assert ttft["note"] == "no TTFT data: this vLLM version does not expose it"
    page = client.get(f"/hosts/{host.code}/").content.decode()
    assert "no TTFT data: this vLLM version does not expose it" in page


def test_the_acceptance_chart_draws_the_kb_baseline_for_the_recipe(client, demo_fleet,
                                                                   role_user):
    host = demo_fleet["hosts"][0]  # 31B + EAGLE3 (LIGHT recipe)
    client.force_login(role_user("viewer"))
    data = chart_data(client.get(f"/hosts/{host.code}/").content.decode())
    spec = [c for c in data["charts"] if c["id"].endswith("-spec")]
    expected = current_knowledge_base().settings["baselines"]["gemma4-31b"]["eagle3"]
    assert spec and all(c["baseline"] == pytest.approx(expected["acceptance_rate"] * 100)
                        for c in spec)


def test_a_host_without_samples_says_so_instead_of_drawing_zero(client, demo_fleet, role_user):
    host = demo_fleet["hosts"][2]  # /metrics unreachable
    client.force_login(role_user("viewer"))
    data = chart_data(client.get(f"/hosts/{host.code}/").content.decode())
    kv = next(c for c in data["charts"] if c["id"].endswith("-kv"))
    assert kv["note"] and all(p[1] is None for d in kv["datasets"] for p in d["data"])


def test_the_export_follows_the_current_filter(client, demo_fleet, role_user):
    client.force_login(role_user("viewer"))
    expected = Finding.objects.active().filter(severity="high").count()
    body = b"".join(client.get("/findings/export.csv", {"severity": "high"})
                    .streaming_content).decode()
    rows = list(csv.DictReader(io.StringIO(body)))
    assert len(rows) == expected > 0 and {r["severity"] for r in rows} == {"high"}
    data = json.loads(b"".join(client.get("/findings/export.json", {"severity": "high"})
                               .streaming_content))
    assert {d["code"] for d in data} == {r["code"] for r in rows}


def test_the_findings_page_filters_by_status(client, demo_fleet, role_user):
    operator = role_user("operator")
    client.force_login(operator)
    finding = Finding.objects.active().first()
    finding.acknowledge(operator, "on it")
    page = client.get("/findings/", {"status": "acknowledged"}).content.decode()
    assert re.findall(r'data-finding="([^"]+)"', page) == [str(finding.code)]


def test_the_kb_finds_the_servers_hit_by_an_upstream_issue_number(client, demo_fleet,
                                                                  role_user):
    client.force_login(role_user("viewer"))
    finding = Finding.objects.active().exclude(references=[]).filter(
        references__icontains="/issues/").first()
    url = next(r for r in finding.references if "/issues/" in r)
    number = url.rstrip("/").rsplit("/", 1)[1]
    page = client.get("/kb/", {"q": f"#{number}"}).content.decode()
    assert f'data-rule="{finding.rule_id}"' in page
    assert finding.host.hostname in page.split(f'data-rule="{finding.rule_id}"')[1]
    assert 'data-rule="' in page and "No rule matches" not in page
    assert "No rule matches" in client.get("/kb/", {"q": "#999999999"}).content.decode()


def test_the_kb_flags_only_rules_verified_before_the_release_it_claims(client, role_user):
    """A fresh install flags none; a rule verified before the KB's
    verified_through release (0.30.0, published 2026-09-23) is flagged, by name of release."""
    from datetime import date

    from audit.models import Rule
    from audit.rulebook import current_knowledge_base, sync_rules

    sync_rules()
    client.force_login(role_user("viewer"))
    assert "⚠ before" not in client.get("/kb/").content.decode()
    rule = Rule.objects.first()
    Rule.objects.filter(pk=rule.pk).update(last_verified=date(2026, 9, 22))
    page = client.get("/kb/").content.decode()
    row = page.split(f'data-rule="{rule.rule_id}"')[1].split("</tr>")[0]
    vetted = current_knowledge_base().verified_through
    assert f"⚠ before {vetted}" in row and page.count("⚠ before") == 1


def test_the_versions_page_marks_a_version_with_high_known_issues_risky(client, demo_fleet,
                                                                        role_user):
    """Risky follows what the release brings (version-gated rules); a configuration finding
    is listed in its own column and never marks the release."""
    client.force_login(role_user("viewer"))
    page = client.get("/versions/").content.decode()
    gated = {r.id for r in current_knowledge_base().rules if r.version_gated}
    high = Finding.objects.active().filter(kind__in=("known_issue", "ceiling"),
                                           severity__in=("high", "critical"))
    risky = set(high.filter(rule_id__in=gated).values_list("server__vllm_version", flat=True))
    assert risky
    for version in risky:
        row = page.split(f'data-version="{version}"')[1].split("</tr>")[0]
        assert "state-risky" in row or "state-blocked" in row
    for version, rule_id in high.exclude(rule_id__in=gated).values_list(
            "server__vllm_version", "rule_id"):
        row = page.split(f'data-version="{version}"')[1].split("</tr>")[0]
        assert rule_id in row.split("</td>")[-2]  # the configuration column


def test_the_versions_page_shows_pending_upgrades_onto_a_version_nobody_runs_yet(
        client, demo_fleet, role_user):
    from fleet.models import Server

    server = Server.objects.filter(is_running=True).first()
    Server.objects.filter(pk=server.pk).update(installed_vllm_version="9.9.9")
    client.force_login(role_user("viewer"))
    page = client.get("/versions/").content.decode()
    row = page.split('data-version="9.9.9"')[1].split("</tr>")[0]
    cells = [c.split(">")[-1] for c in row.split("</td>")]
    assert "1" in cells  # the pending column counts the one server


def test_a_silenced_finding_that_stops_and_fires_again_comes_back_open(
        client, role_user, enrolled, post_report, make_report):
    from audit.evaluation import evaluate_report

    _, token = enrolled()

    def report(version: str) -> None:
        body = make_report(server={"vllm_version": version, "installed_vllm_version": version})
        assert post_report(body, token=token).status_code == 202
        evaluate_report(body["report_id"])

    report("0.29.0")
    first = Finding.objects.get(rule_id="gemma4-version-ceiling")
    operator = role_user("operator")
    first.silence(operator, timezone.now() + timedelta(days=7), "upgrade window Friday")
    report("0.25.1")
    report("0.29.0")
    client.force_login(operator)
    page = client.get("/findings/", {"rule": "gemma4-version-ceiling", "status": "all"})
    rows = re.findall(r'data-finding="([^"]+)"', page.content.decode())
    again = Finding.objects.get(rule_id="gemma4-version-ceiling", status="open")
    first.refresh_from_db()
    assert first.status == "resolved" and again.pk != first.pk
    assert set(rows) == {str(first.code), str(again.code)}
    assert "upgrade window Friday" not in client.get(f"/findings/{again.code}/").content.decode()


def test_the_findings_pages_run_worst_first_then_newest_across_pages(client, role_user):
    from audit.models import SEVERITY_ORDER

    fleetgen.generate(hosts=12, findings_per_host=20, spark_hosts=0)
    client.force_login(role_user("viewer"))
    shown = []
    for page in (1, 2, 3):
        body = client.get("/findings/", {"page": page}).content.decode()
        shown += re.findall(r'data-finding="([^"]+)"', body)
    expected = sorted(Finding.objects.active(), key=lambda f: (
        -SEVERITY_ORDER[f.severity], -f.last_seen.timestamp(), f.pk))
    assert len(shown) == len(expected) > 200
    assert shown == [str(f.code) for f in expected]


def test_the_hosts_pages_run_worst_finding_first_then_by_name(client, role_user):
    from audit.models import SEVERITY_ORDER

    fleetgen.generate(hosts=120, findings_per_host=1.5, spark_hosts=0)
    client.force_login(role_user("viewer"))
    shown = []
    for page in (1, 2, 3):
        body = client.get("/", {"page": page}).content.decode()
        shown += re.findall(r'<tr data-host="([^"]+)"', body)
    worst = {}
    for f in Finding.objects.active():
        worst[f.host_id] = max(worst.get(f.host_id, -1), SEVERITY_ORDER[f.severity])
    expected = sorted(Host.objects.all(), key=lambda h: (-worst.get(h.pk, -1), h.hostname, h.pk))
    assert any(h.pk not in worst for h in expected)  # some hosts are clean: listed last
    assert shown == [h.hostname for h in expected]
