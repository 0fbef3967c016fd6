"""Redis (broker and cache) stops during ingest and comes back empty.

A private ``redis-server`` is used, never the machine's shared one. After Redis
returns, the evaluation sweep (``fleet.tasks.sweep_unevaluated``, run by beat every
minute for reports older than ``SWEEP_GRACE``) enqueues what the outage left
unevaluated; the tests age the leftovers by ``SWEEP_GRACE`` instead of waiting it out.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from django.db.models import F
from faultkit import FAKE_MACHINE_ID, WAIT_S, run_django, server_env, wait_for

from fleet.models import Report
from fleet.tasks import SWEEP_GRACE

pytestmark = [pytest.mark.slow, pytest.mark.worker]

SWEEP = "from fleet.tasks import sweep_unevaluated; print(sweep_unevaluated())"


def _stored(host) -> list[str]:
    return [str(r) for r in Report.objects.filter(host=host).order_by("id")
            .values_list("report_id", flat=True)]


def _unevaluated(host) -> int:
    return Report.objects.filter(host=host, evaluated_at=None).count()


def _sweep_after_grace(db_url: str, redis_url: str) -> int:
    """Age the unevaluated reports past the sweep's grace, then run the real sweep."""
    Report.objects.filter(evaluated_at=None).update(
        received_at=F("received_at") - SWEEP_GRACE - timedelta(seconds=1))
    return int(run_django(server_env(db_url, redis_url), SWEEP).strip().splitlines()[-1])


def test_no_report_is_lost_across_a_redis_outage_and_all_are_evaluated_after_it(
        test_db_url, private_redis, enrolled, dashboard, worker, agent, tmp_path: Path):
    host, token = enrolled(machine_id=FAKE_MACHINE_ID, hostname="gpu-node-7")
    eval_log = tmp_path / "evaluations.log"
    web = dashboard(test_db_url, private_redis.url)
    worker(test_db_url, private_redis.url, queues="evaluate,default",
           FAULT_EVAL_LOG=str(eval_log))
    node = agent(web.url, token).start()
    assert wait_for(lambda: len(_stored(host)) >= 3 and not _unevaluated(host), WAIT_S)

    private_redis.stop()
    before = len(node.created())
    # Three collections during the outage: refused and spooled, or stored unevaluated.
    assert wait_for(lambda: len(node.created()) >= before + 3, WAIT_S)
    private_redis.start()  # empty: whatever was queued is gone
    assert wait_for(lambda: not node.pending(), WAIT_S), node.text()[-2000:]
    node.stop()

    _sweep_after_grace(test_db_url, private_redis.url)
    assert wait_for(lambda: not _unevaluated(host), WAIT_S), web.text()[-2000:]
    created, stored, left = node.created(), _stored(host), node.pending()
    assert stored + left == created and len(stored) == len(set(stored))
    evaluations = Counter(line.split()[0] for line in eval_log.read_text().splitlines())
    assert evaluations == Counter(dict.fromkeys(stored, 1))


def test_a_report_posted_while_redis_is_down_is_stored_and_evaluated_after_it_returns(
        test_db_url, private_redis, enrolled, make_report, dashboard, worker):
    _, token = enrolled()
    web = dashboard(test_db_url, private_redis.url)
    private_redis.stop()
    body = make_report()
    answer = httpx.post(web.url + "/api/v1/reports", content=gzip.compress(
        json.dumps(body).encode()), headers={"Authorization": f"Bearer {token}",
        "Content-Type": "application/json", "Content-Encoding": "gzip"}, timeout=30)

    assert answer.status_code == 202, answer.text
    report = Report.objects.get(report_id=body["report_id"])
    assert report.evaluated_at is None
    private_redis.start()
    worker(test_db_url, private_redis.url, queues="evaluate,default")
    assert _sweep_after_grace(test_db_url, private_redis.url) == 1
    assert wait_for(lambda: Report.objects.get(pk=report.pk).evaluated_at, WAIT_S)
