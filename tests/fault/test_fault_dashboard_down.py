"""The dashboard goes down (SIGKILL, mid-request or not) and comes back, twice, while a
real ``fleet-agent`` keeps reporting: every report is stored exactly once, in order, and
deriving them (the worker's step; no worker runs here) leaves the host at the newest."""

from __future__ import annotations

import pytest
from faultkit import FAKE_MACHINE_ID, WAIT_S, wait_for

from fleet.models import ChangeEvent, Report
from fleet.recording import derive_report

pytestmark = [pytest.mark.slow]


def _stored(host) -> list[str]:
    return [str(r) for r in Report.objects.filter(host=host).order_by("id")
            .values_list("report_id", flat=True)]


def test_an_agent_loses_nothing_and_duplicates_nothing_across_dashboard_outages(
        test_db_url, shared_broker, enrolled, dashboard, agent):
    host, token = enrolled(machine_id=FAKE_MACHINE_ID, hostname="gpu-node-7")
    web = dashboard(test_db_url, shared_broker)
    node = agent(web.url, token).start()
    assert wait_for(lambda: len(_stored(host)) >= 3, WAIT_S), node.text()[-2000:]

    for _ in range(2):                      # down, reports pile up, back, drained
        web.kill9()
        before = len(node.created())
        assert wait_for(lambda b=before: len(node.pending()) >= 3
                        and len(node.created()) >= b + 3, WAIT_S), node.text()[-2000:]
        web.start()
        assert wait_for(lambda: not node.pending(), WAIT_S), node.text()[-2000:]
    node.stop()

    created, stored, left = node.created(), _stored(host), node.pending()
    assert len(stored) == len(set(stored))              # each report stored once
    assert stored + left == created                     # nothing lost, order kept
    assert len(stored) >= 9
    for report_id in stored:                            # the worker's step, in arrival order
        derive_report(report_id)
    host.refresh_from_db()
    newest = Report.objects.get(report_id=stored[-1])
    assert host.last_collected_at == newest.collected_at
    # The same vLLM process throughout: a replayed backlog must not look like restarts.
    assert not ChangeEvent.objects.filter(host=host, kind=ChangeEvent.Kind.RESTART).exists()
