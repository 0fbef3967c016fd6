"""The recommendation pages show what the recommended command buys, with its chart data."""

from __future__ import annotations

import html
import json
import re
import uuid
from datetime import UTC, datetime

import pytest
from seedpoints import POINTS, report

from fleet.models import Host

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.recommend_pages.urls")]


@pytest.fixture
def loaded_host(enrolled, post_report):
    """PUSH (TP=2 on two H100s) at 4K/512, c=64, with its /metrics, through the ingest API."""
    _, token = enrolled()
    rep = report(POINTS["PUSH 4K/512"])
    rep["host"].update(machine_id="machine-1", hostname="gpu-node-1")
    rep["report_id"] = str(uuid.uuid4())
    now = datetime.now(UTC).isoformat()
    rep["collected_at"] = now
    rep["servers"][0]["metrics"]["scraped_at"] = now
    assert post_report(rep, token=token).status_code in (200, 201, 202)
    return Host.objects.get(machine_id="machine-1")




def _curve(body: str) -> dict:
    found = re.search(r'<figure class="chart perf-chart">.*?<script type="application/json">'
                      r"(.*?)</script>", body, re.S)
    assert found, "no chart data next to the recommendation"
    return json.loads(found.group(1))


def test_recommend_page_says_what_the_command_buys_with_a_chart(signed_in, loaded_host):
    response = signed_in.get(f"/hosts/{loaded_host.code}/recommend/")
    body = response.content.decode()
    assert response.status_code == 200
    buys = html.unescape(re.search(r"<span data-buys>(.*?)</span>", body).group(1))
    # 2 x TP=1 replaces TP=2 for short chat: the seed's ~9 % TP overhead comes back.
    assert "2 x TP=1" in body
    assert buys.startswith("+9% output tokens/s") and "TPOT (78 ->" in buys, buys
    assert "calibrated by this server" in buys
    assert "server / model = 3.4" in body  # the calibration ratio, shown
    assert "median ratio 3.4" in body and "spread 1.0x across 1 server." in body
    assert "/static/js/perfchart.js" in body and "chart.umd.min.js" in body
    curve = _curve(body)
    assert curve["concurrency"][0] == 1 and curve["measured"]["concurrency"] == 64
    assert len(curve["current"]["output_tps"]) == len(curve["concurrency"])
    assert len(curve["recommended"]["tpot_p99_s"]) == len(curve["concurrency"])


def test_host_page_carries_the_same_prediction(signed_in, loaded_host):
    body = signed_in.get(f"/hosts/{loaded_host.code}/").content.decode()
    assert "What it buys:" in body and "/static/js/perfchart.js" in body
    page = signed_in.get(f"/hosts/{loaded_host.code}/recommend/").content.decode()
    assert _curve(body) == _curve(page)
