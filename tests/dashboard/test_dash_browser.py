"""The dashboard in real headless Chromium (Debian's build, driven by Playwright).

The fleet is seeded through the ingest API and evaluated by the real rules
(``demo_fleet``); pages are served by pytest-django's ``live_server``. Every test
saves a screenshot under ``var/screenshots/`` for people to look at.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
SHOTS = Path(__file__).resolve().parents[2] / "var" / "screenshots"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]

#: Longest wait for a page, selector or download, milliseconds.
BROWSER_TIMEOUT_MS = 120_000

pytestmark = [pytest.mark.browser]


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One headless Chromium for the module, with a fresh profile directory."""
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop in this thread; Django would then refuse
    # ORM calls from the test body (they are synchronous and safe here).
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    if not CHROMIUM.exists():  # a failure, never a silent skip (.ci/run installs it)
        pytest.fail("browser tests need Debian's chromium at /usr/bin/chromium: "
                    "apt-get install -y chromium", pytrace=False)
    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(profile), executable_path=str(CHROMIUM), headless=True, args=ARGS,
            viewport={"width": 1440, "height": 900}, accept_downloads=True)
        # Playwright's 30 s default is short for a loaded 2-core CI machine (the live server
        # renders the fleet's pages); a page that is there ends the wait at once.
        context.set_default_timeout(BROWSER_TIMEOUT_MS)
        yield context
        context.close()
    os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh tab with no session cookie."""
    browser.clear_cookies()
    tab = browser.new_page()
    yield tab
    tab.close()


def shot(page: Any, name: str, full_page: bool = True) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=full_page)


def sign_in(page: Any, live_server: Any, username: str) -> None:
    # A bare `from conftest import` picks whichever conftest pytest loaded first.
    from tests.dashboard.conftest import PASSWORD

    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_selector("#counts")


@pytest.fixture
def seeded(transactional_db: None, demo_fleet: dict, role_user: Any) -> dict:
    """The demo fleet plus one user per role, committed for the live server."""
    return {**demo_fleet, "users": {r: role_user(r) for r in ("viewer", "operator", "admin")}}


def test_an_operator_signs_in_and_sees_the_fleet_with_counts(page, live_server, seeded):
    sign_in(page, live_server, "operator-user")
    assert page.locator('[data-count="hosts"]').inner_text() == "3"
    assert int(page.locator('[data-count="open"]').inner_text()) > 0
    hosts = page.locator("#hosts tbody tr").all_inner_texts()
    assert len(hosts) == 3 and any("gpu-h100-push-01" in h for h in hosts)
    shot(page, "overview")
    page.emulate_media(color_scheme="dark")  # the theme follows the system setting
    shot(page, "overview-dark", full_page=False)


def test_the_host_page_draws_charts_with_data_points(page, live_server, seeded):
    host = seeded["hosts"][0]
    sign_in(page, live_server, "viewer-user")
    page.goto(f"{live_server.url}/hosts/{host.code}/?window=24h")
    page.wait_for_selector("canvas[data-chart]")
    points = page.evaluate("""() => Object.fromEntries(
        Array.from(document.querySelectorAll('canvas[data-chart]')).map(c => {
            const chart = Chart.getChart(c);
            const n = chart ? chart.data.datasets.reduce(
                (sum, d) => sum + d.data.filter(p => p.y !== null).length, 0) : -1;
            return [c.dataset.chart, n];
        }))""")
    kv = [n for chart_id, n in points.items() if chart_id.endswith("-kv")]
    assert kv and all(n > 50 for n in kv), points  # 5 h of data in 288 s buckets
    assert points["host-gpumem"] > 50 and points["host-gpupower"] > 50
    shot(page, "host-detail")
    shot(page, "host-detail-top", full_page=False)
    page.locator("section.server .charts").first.screenshot(
        path=str(SHOTS / "host-detail-server-charts.png"))
    page.emulate_media(color_scheme="dark")
    page.reload()
    page.wait_for_selector("canvas[data-chart]")
    shot(page, "host-detail-dark", full_page=False)


def test_an_operator_acknowledges_and_silences_findings(page, live_server, seeded):
    from audit.models import Finding

    sign_in(page, live_server, "operator-user")
    page.goto(f"{live_server.url}/findings/")
    rows = page.locator("#findings tbody tr")
    first, second = rows.nth(0), rows.nth(1)
    ack_code, silence_code = first.get_attribute("data-finding"), second.get_attribute(
        "data-finding")
    first.locator("input[name=note]").fill("on call is rolling back")
    first.locator("button[name=ack]").click()
    page.wait_for_selector(".messages li.success")
    row = page.locator(f'tr[data-finding="{silence_code}"]')
    row.locator("details.silence summary").click()
    row.locator("select[name=duration]").select_option("4h")
    row.locator("input[name=reason]").fill("upstream fix lands Tuesday")
    row.locator("button[name=silence]").click()
    page.wait_for_selector(".messages li.success")
    acked, silenced = Finding.objects.get(code=ack_code), Finding.objects.get(code=silence_code)
    assert (acked.status, acked.acknowledged_by.username) == ("acknowledged", "operator-user")
    assert (silenced.status, silenced.silence_reason) == ("silenced",
                                                          "upstream fix lands Tuesday")
    assert "acknowledged" in page.locator(f'tr[data-finding="{ack_code}"]').inner_text()
    shot(page, "findings")
    page.goto(f"{live_server.url}/findings/{ack_code}/")
    assert "on call is rolling back" in page.locator("#history").inner_text()
    shot(page, "finding-detail")


def test_the_findings_export_downloads_the_current_filter_as_csv(page, live_server, seeded,
                                                                 tmp_path):
    from audit.models import Finding

    sign_in(page, live_server, "viewer-user")
    page.goto(f"{live_server.url}/findings/?severity=high")
    with page.expect_download() as info:
        page.click("#export-csv")
    target = tmp_path / "findings.csv"
    info.value.save_as(str(target))
    rows = list(csv.DictReader(target.open(encoding="utf-8")))
    assert len(rows) == Finding.objects.active().filter(severity="high").count() > 0
    assert {r["severity"] for r in rows} == {"high"}


def test_a_viewer_cannot_acknowledge(page, live_server, seeded):
    from audit.models import Finding

    sign_in(page, live_server, "viewer-user")
    page.goto(f"{live_server.url}/findings/")
    assert page.locator("button[name=ack]").count() == 0
    code = page.locator("#findings tbody tr").first.get_attribute("data-finding")
    token = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    answer = page.request.post(f"{live_server.url}/findings/{code}/acknowledge/",
                               form={"note": "sneaky"}, headers={"X-CSRFToken": token,
                                                                 "Referer": live_server.url})
    assert answer.status == 403
    assert Finding.objects.get(code=code).status == "open"
    shot(page, "findings-viewer")


def test_the_other_pages_render_for_an_admin(page, live_server, seeded):
    sign_in(page, live_server, "admin-user")
    for path, name, selector in (("/kb/", "knowledge-base", "#rules"),
                                 ("/kb/?q=%2350477", "knowledge-base-issue", "#rules"),
                                 ("/versions/", "versions", "#versions"),
                                 ("/settings/", "settings", "#tokens")):
        page.goto(f"{live_server.url}{path}")
        page.wait_for_selector(selector)
        shot(page, name)
    page.goto(f"{live_server.url}/settings/")
    page.fill("input[name=name]", "rack-7")
    page.click("text=Create secret")
    assert page.locator(".secret").inner_text().startswith("fes_")


def test_no_page_breaks_the_content_security_policy(page, live_server, seeded):
    """The CSP forbids inline scripts and styles; Chromium reports every
    blocked one on the console, and the page behaviours moved to static/js/ui.js work."""
    from alerts.models import AlertChannel

    channel = AlertChannel.objects.create(name="ops mail", kind="email",
                                          destination="ops@example.com")
    violations: list[str] = []
    page.on("console", lambda msg: violations.append(msg.text)
            if "Content Security Policy" in msg.text else None)
    sign_in(page, live_server, "admin-user")
    host = seeded["hosts"][0]
    for path, selector in ((f"/hosts/{host.code}/?window=24h", "canvas[data-chart]"),
                           ("/findings/", "#export-csv"), ("/agent/add-host/", "form"),
                           ("/alerts/deliveries/", "select[data-autosubmit]"),
                           ("/plan/", "main"), ("/admin/", "#content")):
        response = page.goto(f"{live_server.url}{path}")
        assert "script-src 'self'" in response.headers["content-security-policy"], path
        page.wait_for_selector(selector)
    page.goto(f"{live_server.url}/alerts/deliveries/")
    page.select_option("select[data-autosubmit]", str(channel.code))
    page.wait_for_url(f"**channel={channel.code}")
    assert violations == []


def test_the_host_page_says_what_to_do_above_the_fold(page, live_server, seeded):
    """A fresh reader sees the findings that matter and the command to run in the
    first screen, before the charts; the filter bar keeps one line with a long GPU name."""
    sign_in(page, live_server, "viewer-user")
    for host in seeded["hosts"]:
        page.set_viewport_size({"width": 1280, "height": 900})
        page.goto(f"{live_server.url}/hosts/{host.code}/")
        box = page.locator("#what-to-do").bounding_box()
        assert box is not None and box["y"] < 300
        charts = page.locator("h2", has_text="Charts").bounding_box()
        assert charts["y"] > box["y"]
        commands = page.locator("#what-to-do pre.cmd")
        assert page.locator("#what-to-do button.copy").count() == commands.count()
        for i in range(commands.count()):  # each command wraps inside the summary's box
            cmd = commands.nth(i).bounding_box()
            assert cmd["x"] + cmd["width"] <= box["x"] + box["width"]
        shot(page, f"host-what-to-do-{host.hostname}", full_page=False)
    page.goto(f"{live_server.url}/")
    bar = page.locator("form.filters").bounding_box()
    assert bar["width"] <= 1280


def test_the_add_host_one_liner_stays_inside_its_box_with_a_copy_button(page, live_server,
                                                                         seeded):
    """On a laptop screen the install one-liner wraps inside its box (not past it and the
    page), and Copy copies exactly the command."""
    violations: list[str] = []
    page.on("console", lambda msg: violations.append(msg.text)
            if "Content Security Policy" in msg.text else None)
    sign_in(page, live_server, "admin-user")
    page.set_viewport_size({"width": 1024, "height": 800})
    page.context.grant_permissions(["clipboard-read", "clipboard-write"],
                                   origin=live_server.url)
    page.goto(f"{live_server.url}/agent/add-host/")
    page.fill("input[name=name]", "rack 12 rollout")
    page.click("text=Create a secret and show the command")
    box = page.locator("#install-command")
    box.wait_for()
    shot(page, "add-host-one-liner", full_page=False)
    fits = page.evaluate("""() => {
        const pre = document.getElementById('install-command');
        const r = pre.getBoundingClientRect();
        return {scroll: pre.scrollWidth, client: pre.clientWidth, right: r.right,
                page: document.documentElement.scrollWidth, view: window.innerWidth};
    }""")
    assert fits["scroll"] <= fits["client"] + 1, fits  # wrapped, nothing hidden sideways
    assert fits["right"] <= fits["view"] and fits["page"] <= fits["view"], fits
    button = page.locator("button[data-copy=install-command]")
    button_box, pre_box = button.bounding_box(), box.bounding_box()
    assert button_box["x"] + button_box["width"] <= fits["view"]
    assert button_box["y"] < pre_box["y"] + pre_box["height"]  # beside the box, not below
    button.click()
    page.wait_for_function("() => document.querySelector("
                           "'button[data-copy=install-command]').textContent === 'Copied'")
    assert page.evaluate("navigator.clipboard.readText()") == box.inner_text()
    assert violations == []
