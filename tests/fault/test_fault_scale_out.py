"""Scale-out: two worker processes on one broker share a burst of reports and the
alerts they cause; nothing is evaluated twice and no alert is sent twice."""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from faultkit import WAIT_S, wait_for

from alerts.alert_tasks import sweep
from alerts.models import AlertChannel, Delivery
from audit import evaluation
from audit.models import Finding, FindingEvent, RuleFailure
from fleet.models import Report
from fleet.recording import derive_report
from tests.conftest import iso

HOSTS = 50
START = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=10)
#: Seconds to wait after the last expected delivery, so that a duplicate would be seen.
QUIET_S = 2
OLD = {"vllm_version": "0.25.1", "installed_vllm_version": "0.25.1"}
NEW = {"pid": 4321, "vllm_version": "0.27.0", "installed_vllm_version": "0.27.0"}


def _burst(tokens: list[tuple[str, str]], make_report, post_report, minutes: int,
           server: dict) -> list[str]:
    """One report per host, all posted back to back; returns their report_ids."""
    ids = []
    for machine_id, token in tokens:
        body = make_report(server=server, host={"machine_id": machine_id,
                                                "hostname": f"node-{machine_id}"},
                           collected_at=iso(START + timedelta(minutes=minutes)))
        assert post_report(body, token).status_code == 202
        ids.append(body["report_id"])
    return ids


def _all_evaluated(ids: list[str]) -> bool:
    return not Report.objects.filter(report_id__in=ids, evaluated_at=None).exists()


@pytest.mark.slow
@pytest.mark.worker
def test_two_workers_share_a_burst_without_evaluating_or_alerting_twice(
        test_db_url, shared_broker, rules, enrolled, make_report, post_report, worker,
        receiver, tmp_path: Path):
    AlertChannel.objects.create(kind="webhook", name="oncall", destination=receiver.url,
                                secret="fault-secret")
    tokens = [(f"burst-{i}", enrolled(machine_id=f"burst-{i}", hostname=f"node-burst-{i}")[1])
              for i in range(HOSTS)]
    eval_log = tmp_path / "evaluations.log"
    pool = [worker(test_db_url, shared_broker, queues="evaluate,alerts",
                   FAULT_EVAL_LOG=str(eval_log)) for _ in range(2)]

    first = _burst(tokens, make_report, post_report, 0, OLD)
    assert wait_for(lambda: _all_evaluated(first), WAIT_S), pool[0].text()[-2000:]
    upgrades = _burst(tokens, make_report, post_report, 1, NEW)  # 0.25.1 -> 0.27.0 each
    assert wait_for(lambda: _all_evaluated(upgrades), WAIT_S), pool[1].text()[-2000:]
    # Beat's alerts sweep on both workers at once, racing the dispatches the evaluations
    # scheduled for the same undispatched events.
    sweep.delay()
    sweep.delay()
    sent = Delivery.objects.filter(status=Delivery.Status.SENT)
    assert wait_for(lambda: not FindingEvent.objects.filter(dispatched_at=None).exists()
                    and Delivery.objects.count() == sent.count()
                    and len(receiver.requests) >= sent.count(), WAIT_S), pool[0].text()[-2000:]
    time.sleep(QUIET_S)  # room for a duplicate send to arrive before counting

    lines = eval_log.read_text().splitlines()
    evaluations = Counter(line.split()[0] for line in lines)
    assert evaluations == Counter({i: 1 for i in first + upgrades})    # each exactly once
    assert len({line.split()[1] for line in lines}) == 2                # both workers shared it
    assert not RuleFailure.objects.exists()
    active = Finding.objects.exclude(status=Finding.Status.RESOLVED)
    assert active.count() == len(set(active.values_list("server_id", "rule_id")))
    opened = Counter(FindingEvent.objects.filter(kind=FindingEvent.Kind.OPENED)
                     .values_list("finding_id", flat=True))
    assert set(opened.values()) == {1}
    upgraded = FindingEvent.objects.filter(kind=FindingEvent.Kind.VERSION_CHANGED)
    assert upgraded.count() == HOSTS
    codes = Counter(headers["x-fleet-delivery"] for headers, _ in receiver.requests)
    assert set(codes.values()) == {1}                                   # no delivery twice
    assert set(codes) == {str(c) for c in sent.values_list("code", flat=True)}
    assert not sent.filter(possible_duplicate=True).exists()
    hosts_alerted = Counter(item.get("host") for _, body in receiver.requests
                            if body["trigger"] == "risky_upgrade" for item in body["items"])
    assert len(hosts_alerted) == HOSTS and set(hosts_alerted.values()) == {1}


@pytest.mark.django_db
def test_an_upgrade_report_evaluated_after_a_newer_one_still_raises_its_upgrade_event(
        rules, enrolled, make_report, post_report):
    _, token = enrolled()
    bodies = [make_report(server=server, collected_at=iso(START + timedelta(minutes=i)))
              for i, server in enumerate((OLD, NEW, NEW))]
    for body in bodies:
        assert post_report(body, token).status_code == 202
    for index in (0, 2, 1):  # worker B finishes the newest report before worker A the upgrade
        derive_report(bodies[index]["report_id"])  # the worker's first step
        evaluation.evaluate_report(bodies[index]["report_id"])

    events = FindingEvent.objects.filter(kind=FindingEvent.Kind.VERSION_CHANGED)
    assert [(e.payload["old"], e.payload["new"]) for e in events] == [("0.25.1", "0.27.0")]
