"""Re-running the demo over the same state directory replays the same fleet: the servers
keep their pids and start times, so the dashboard opens no new configuration finding (no
restart "without a config change" for every server). A first run moves the story's clock
after enrolling (start_clock_now); the servers' start times must not move with it."""

from __future__ import annotations

import time

import pytest

from audit.models import Finding
from demo.timeline import FleetSim, fleet_specs

pytestmark = pytest.mark.django_db(transaction=True)

HOSTS = ["h100-light-01", "h100-chat-05", "h100-spec-04", "case006-rtx-5070-ti",
         "case034-a100-pcie-40gb"]


def test_a_rerun_opens_no_new_finding(build_fleet, eager_dashboard, tmp_path) -> None:
    from fleet.models import EnrollmentSecret

    specs = [s for s in fleet_specs(include_cases=True) if s.hostname in HOSTS]
    assert len(specs) == len(HOSTS)
    sim = build_fleet(specs=specs, base=tmp_path / "sim", speed=5.0)
    _, secret = EnrollmentSecret.create("simulator-test", max_uses=100)
    sim.enroll(eager_dashboard, secret)
    time.sleep(1.5)  # enrolling takes time: the story's clock starts after it
    sim.start_clock_now()
    sim.run_round()
    time.sleep(2.1)
    sim.run_round()
    sim.close()
    before = set(Finding.objects.values_list("pk", flat=True))
    again = FleetSim(tmp_path / "sim", specs=specs, speed=5.0)
    try:
        again.run_round()
        time.sleep(2.1)
        again.run_round()
    finally:
        again.close()
    # live metric findings follow the replayed traffic; configuration findings must not move
    opened = Finding.objects.exclude(pk__in=before).exclude(kind="metric")
    assert [(f.rule_id, f.server.identity if f.server else None, f.host.hostname)
            for f in opened] == []
