"""The Alertmanager sync through a real ``celery worker -Q alerts`` on real Redis, into a
real Alertmanager: the task is routed to the alerts queue, fires the open findings and
resolves one acknowledged in the dashboard within seconds, not at the next beat."""

from __future__ import annotations

import pytest
from alertkit import ChannelFactory, FindingFactory, wait_for
from amkit import start_alertmanager

from alerts.alert_tasks import enqueue_sync

pytestmark = [pytest.mark.worker, pytest.mark.slow]


def test_a_worker_syncs_the_channel_and_an_acknowledgement_resolves_the_alert(workers,
                                                                             tmp_path):
    finding = FindingFactory(severity="critical")
    with start_alertmanager(tmp_path) as am:
        ChannelFactory(kind="alertmanager", destination=am.url, secret="")
        workers.start()
        assert enqueue_sync()
        assert wait_for(lambda: am.alerts(finding_id=str(finding.code))), workers.logs()

        finding.acknowledge(None, "known, fix scheduled")  # no sync asked for: the mute does
        assert wait_for(lambda: not am.alerts(finding_id=str(finding.code))), workers.logs()
