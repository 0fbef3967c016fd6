"""Recommendation and upgrade-planner pages (login required, real database)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet.models import Host, Server

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.recommend_pages.urls")]

PUSH_ARGV = ["vllm", "serve", "cyankiwi/gemma-4-31B-it-AWQ-4bit", "--tensor-parallel-size", "2",
             "--max-model-len", "262144", "--max-num-seqs", "256", "--reasoning-parser",
             "gemma4", "--tool-call-parser", "gemma4", "--enable-auto-tool-choice"]


@pytest.fixture
def ingested(make_report, enrolled, post_report):
    """One host with one Gemma 4 server on two H100s, stored through the ingest API."""
    _, token = enrolled()
    report = make_report(server={"argv": PUSH_ARGV, "installed_vllm_version": "0.27.1",
                                 "gpu_uuids": ["GPU-aaaa", "GPU-bbbb"]})
    second = dict(report["gpus"][0], index=1, uuid="GPU-bbbb")
    report["gpus"].append(second)
    assert post_report(report, token=token).status_code in (200, 201, 202)
    return Host.objects.get(machine_id="machine-1")




def test_the_planner_pages_need_a_login(client, ingested):
    for url in ("/plan/", "/plan/fleet/", f"/hosts/{ingested.code}/recommend/"):
        response = client.get(url)
        assert response.status_code == 302 and "/login/" in response["Location"], url


def test_the_host_page_shows_each_servers_command_with_a_copy_button(signed_in, ingested):
    response = signed_in.get(f"/hosts/{ingested.code}/recommend/?workload=chat")
    body = response.content.decode()
    assert response.status_code == 200
    assert "vllm serve cyankiwi/gemma-4-31B-it-AWQ-4bit" in body
    # The copy behaviour lives in static/js/ui.js (the CSP forbids inline scripts).
    assert "data-copy-target" in body and "/static/js/ui.js" in body
    from django.contrib.staticfiles import finders

    script = Path(finders.find("js/ui.js")).read_text()
    assert "data-copy-target" in script and "navigator.clipboard" in script
    assert "--max-num-seqs" in body and "2 x TP=1" in body


def test_the_planner_answers_for_a_server_with_the_upstream_issues(signed_in, ingested):
    server = Server.objects.get(host=ingested)
    body = signed_in.get(f"/plan/?server={server.pk}&target=0.27.0").content.decode()
    assert "RISKY" in body
    assert "https://github.com/vllm-project/vllm/issues/50477" in body
    assert "will become 0.27.1 on next restart" in body


def test_the_planner_answers_for_every_server_running_a_model(signed_in, ingested):
    body = signed_in.get("/plan/?model=gemma-4-31B&target=0.25.1").content.decode()
    assert "Scope: servers running gemma-4-31B" in body
    assert "→ 0.25.1" in body and "SAFE" in body


def test_the_fleet_view_counts_servers_each_version_would_put_at_risk(signed_in, ingested):
    response = signed_in.get("/plan/fleet/?candidates=0.25.1,0.27.0")
    rows = {row["target"]: row for row in response.context["rows"]}
    assert rows["0.27.0"]["risky"] + rows["0.27.0"]["blocked"] == 1
    assert rows["0.25.1"]["risky"] + rows["0.25.1"]["blocked"] == 0


def test_a_target_that_is_not_a_version_is_explained(signed_in, ingested):
    body = signed_in.get("/plan/?target=latest").content.decode()
    assert "not a vLLM version" in body


def test_the_planner_summarises_first_and_pages_worst_first(signed_in, ingested, monkeypatch):
    """Counts on top, blocked/risky plans before safe ones, a bounded page."""
    from advice import views

    monkeypatch.setattr(views, "PLANS_PER_PAGE", 1)
    response = signed_in.get("/plan/?target=0.27.0")
    body = response.content.decode()
    summary = response.context["summary"]
    assert body.index('id="plan-summary"') < body.index('class="server plan"')
    assert f"{summary['risky']} risky" in body and summary["risky"] + summary["blocked"] >= 1
    assert len(response.context["plans"]) == 1
    assert response.context["plans"][0]["verdict"] in ("blocked", "risky")
    if response.context["page"].paginator.num_pages > 1:
        assert "page=2" in body
