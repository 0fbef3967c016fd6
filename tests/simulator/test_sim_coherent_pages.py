"""In real headless Chromium, over the replayed demo fleet: no page shows a command that
contradicts a finding on the same page.

The simulator's real agents report to the live dashboard (PostgreSQL, eager tasks): the
crash-looping upgrade (h100-upgrade-08), the seed PUSH recipe (h100-push-01), the EAGLE3
server restarted at TP=2 whose acceptance collapsed (h100-spec-04) and the two-replica LIGHT
host (h100-light-01).
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from demo.timeline import Event
from tests.dashboard.test_dash_browser import browser, page, sign_in  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

HOSTS = ["h100-upgrade-08", "h100-push-01", "h100-spec-04", "h100-light-01"]


def _user() -> None:
    from django.contrib.auth import get_user_model

    from fleet.access import set_role
    from tests.dashboard.conftest import PASSWORD

    set_role(get_user_model().objects.create_user("viewer-user", password=PASSWORD), "viewer")


def _host_page(tab: Any, url: str, hostname: str) -> dict[str, Any]:
    from fleet.models import Host

    host = Host.objects.get(hostname=hostname)
    tab.goto(f"{url}/hosts/{host.code}/")
    tab.wait_for_selector("#what-to-do")
    groups = []
    for group in tab.locator("#what-to-do .todo-server").all():
        groups.append({"server": group.get_attribute("data-server"),
                       "text": group.inner_text(),
                       "commands": group.locator("pre.cmd").all_inner_texts()})
    return {"host": host, "groups": groups, "body": tab.locator("main").inner_text(),
            "badge": tab.locator("h1 .st").get_attribute("class")}


def _traffic_asks_for(host: Any, context: int) -> bool:
    """The recommendation raises ``--max-model-len`` to ``context`` because the observed p99
    prompt asks for it (``advice.recommend.steer.cap_context``), and says so."""
    from advice.recommend.steer import STEP, TRAFFIC_FACTOR
    from advice.views import server_recommendation

    for server in host.servers.filter(is_running=True):
        for row in (server_recommendation(server) or {}).get("diff") or []:
            said = re.match(r"(\d+) tokens: \d+ x the observed p99 prompt of (\d+) tokens",
                            row["reason"]) if row["flag"] == "--max-model-len" else None
            if said and int(said[1]) == context \
                    and context - STEP < TRAFFIC_FACTOR * int(said[2]) <= context:
                return True
    return False


def _flag(command: str, name: str) -> str | None:
    found = re.search(rf"{re.escape(name)}(?:=|\s+)(\S+)", command)
    return found.group(1) if found else None


def test_no_demo_page_shows_a_command_that_contradicts_its_findings(
        enrolled_fleet, live_server, page) -> None:  # noqa: F811 (pytest fixture)
    timeline = (Event(3600.0, "h100-upgrade-08", "fail_upgrade", "fails"),
                Event(3600.0, "h100-spec-04", "tp2", "TP=2, acceptance collapses"))
    from audit.crashloop import CRASH_LOOP_RULE_ID
    from audit.models import Finding

    sim = enrolled_fleet(HOSTS, timeline, speed=5.0)
    sim.run_round()
    sim.skip_ahead(sim.event_time(timeline[0]) - time.time() + 2.5)
    wanted = {CRASH_LOOP_RULE_ID, "eagle-tp-acceptance-collapse"}
    for _ in range(8):  # rounds until the loop and a metrics window at TP=2 are seen
        sim.run_round()
        if wanted <= set(Finding.objects.active().values_list("rule_id", flat=True)):
            break
        time.sleep(1.0)
    _user()
    sign_in(page, live_server, "viewer-user")

    # The crash loop: one remedy, the release that ran pinned, no command that would start
    # the failing release again, and the badge is not green.
    down = _host_page(page, live_server.url, "h100-upgrade-08")
    top = " ".join(g["text"] for g in down["groups"])
    assert "Down: failed start" in top and "pip install vllm==0.25.1" in top
    assert not any("vllm serve" in c for g in down["groups"] for c in g["commands"])
    assert "st-down" in down["badge"]
    page.goto(f"{live_server.url}/")
    row = page.locator("#hosts tbody tr", has_text="h100-upgrade-08")
    assert "st-down" in row.locator(".st").first.get_attribute("class")
    loop = Finding.objects.active().get(server__host=down["host"], rule_id=CRASH_LOOP_RULE_ID)
    assert loop.remediation in down["body"].replace("\n", " ")

    # PUSH: its 262144-token context fits the engine's pool (6.11x): no HIGH wedge finding,
    # and a command that keeps the context the findings do not condemn.
    push = _host_page(page, live_server.url, "h100-push-01")
    assert "Requests longer than the engine's KV pool" not in push["body"]
    for group in push["groups"]:
        for command in group["commands"]:
            assert int(_flag(command, "--max-model-len") or 0) <= 262144

    # spec-04: acceptance collapsed under TP=2; the command drops the drafter at TP > 1 and
    # does not raise the context past what the traffic needs.
    spec = _host_page(page, live_server.url, "h100-spec-04")
    assert "acceptance collapsed under tensor parallel" in spec["body"]
    commands = [c for g in spec["groups"] for c in g["commands"]]
    assert commands
    for command in commands:
        tp = int(_flag(command, "--tensor-parallel-size") or 1)
        assert tp == 1 or "--speculative-config" not in command, command
        context = int(_flag(command, "--max-model-len") or 0)
        # The running 32768, or more only as far as the traffic asks (2 x the p99 prompt of
        # the simulated log-normal traffic, which lands either side of 16K by the window).
        assert context <= 32768 or _traffic_asks_for(spec["host"], context), command

    # Two servers: each server's findings sit with its own command (its port, its GPU).
    light = _host_page(page, live_server.url, "h100-light-01")
    with_commands = [g for g in light["groups"] if g["commands"]]
    assert len(with_commands) == 2
    for group in with_commands:
        port = group["server"].split(":")[-1]
        for command in group["commands"]:
            assert _flag(command, "--port") == port, (group["server"], command)
        assert group["text"].count("port:") <= 1 + group["text"].count(group["server"])
