"""The recommendation chart in real headless Chromium: current vs recommended curves and the
measured point are drawn (Debian's chromium, driven by Playwright, as tests/dashboard)."""

from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from seedpoints import POINTS, report

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
SHOTS = Path(__file__).resolve().parents[2] / "var" / "screenshots"
PASSWORD = "pw-for-perf-chart"  # noqa: S105 (test-only credential)

pytestmark = [pytest.mark.browser]


@pytest.fixture
def loaded_host(transactional_db, enrolled, post_report):
    """PUSH at 4K/512, c=64, ingested and derived (committed for the live server)."""
    from django.contrib.auth import get_user_model

    from fleet.models import Host
    from fleet.recording import derive_report

    _, token = enrolled()
    rep = report(POINTS["PUSH 4K/512"])
    rep["host"].update(machine_id="machine-1", hostname="gpu-node-1")
    rep["report_id"] = str(uuid.uuid4())
    rep["collected_at"] = rep["servers"][0]["metrics"]["scraped_at"] = \
        datetime.now(UTC).isoformat()
    assert post_report(rep, token=token).status_code == 202
    derive_report(rep["report_id"])
    get_user_model().objects.create_user("chart-viewer", password=PASSWORD)
    return Host.objects.get(machine_id="machine-1")


def test_the_chart_draws_both_commands_and_the_measured_point(loaded_host, live_server):
    from playwright.sync_api import sync_playwright

    if not CHROMIUM.exists():  # a failure, never a silent skip (.ci/run installs it)
        pytest.fail("browser tests need /usr/bin/chromium: apt-get install -y chromium",
                    pytrace=False)
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                         args=ARGS)
            page = browser.new_page()
            page.set_default_timeout(120_000)
            page.goto(f"{live_server.url}/accounts/login/")
            page.fill("#id_username", "chart-viewer")
            page.fill("#id_password", PASSWORD)
            page.click("button[type=submit]")
            page.wait_for_load_state()
            page.goto(f"{live_server.url}/hosts/{loaded_host.code}/recommend/")
            page.wait_for_selector("figure.perf-chart canvas")
            drawn = page.evaluate("""() => {
                const chart = Chart.getChart(document.querySelector('figure.perf-chart canvas'));
                return chart ? chart.data.datasets.map(d => [d.label,
                    d.data.filter(p => p.y !== null).length]) : null; }""")
            SHOTS.mkdir(parents=True, exist_ok=True)  # for people to look at
            page.locator("section.server").first.screenshot(
                path=str(SHOTS / "recommend-perf-chart.png"))
            browser.close()
    finally:
        os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    assert drawn is not None, "no Chart.js chart on the perf canvas"
    sets = dict(drawn)
    assert sets["current tok/s"] == 9 and sets["recommended tok/s"] == 9
    assert sets["current p99 TPOT ms"] == 9 and sets["recommended p99 TPOT ms"] == 9
    assert sets["measured p99 TPOT ms"] == 1
