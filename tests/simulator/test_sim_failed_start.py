"""The demo fleet's failed upgrade: ``h100-upgrade-08`` restarts onto its installed
0.27.1, its systemd unit crash-loops, and the dashboard shows it down with the error line and
the rule that explains it, within one agent interval of the first failed report."""

from __future__ import annotations

import time

import pytest

from audit.crashloop import CRASH_LOOP_RULE_ID
from audit.models import Finding
from demo.timeline import Event
from fleet.models import Server

pytestmark = pytest.mark.django_db(transaction=True)

HOST = "h100-upgrade-08"


def test_the_failed_upgrade_shows_down_with_its_cause(enrolled_fleet):
    # Set far beyond the fleet's start-up, then jumped to (no race with a slow start-up).
    timeline = (Event(3600.0, HOST, "fail_upgrade", "fails"),)
    sim = enrolled_fleet([HOST], timeline, speed=5.0)  # 2 s interval, a restart every 0.67 s
    sim.run_round()  # running 0.25.1 with 0.27.1 installed
    assert Server.objects.get(host__hostname=HOST).is_running
    # The unit has been failing for 2.5 s (>= 3 restarts) when the next report is collected.
    sim.skip_ahead(sim.event_time(timeline[0]) - time.time() + 2.5)
    sim.run_round()

    server = Server.objects.get(host__hostname=HOST, identity="port:8000")
    assert not server.is_running
    entry = server.failed_start["entry"]
    assert entry["source"] == "systemd" and entry["unit_or_container"] == "vllm-main.service"
    assert "per-layer attribute" in entry["lines"][-1]
    assert entry["restart_count"] >= 3
    active = {f.rule_id: f for f in Finding.objects.active().filter(server=server)}
    down = active["upm-gemma4-transformers-515-head-dim"]
    assert down.title.startswith("Server down: ")
    assert "per-layer attribute" in down.evidence["matched_line"]
    loop = active[CRASH_LOOP_RULE_ID]
    assert loop.title.startswith("Risky upgrade did not come back")
