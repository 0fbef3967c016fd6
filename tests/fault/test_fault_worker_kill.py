"""A Celery worker SIGKILLed in the middle of an evaluation (rules run, findings half
written, transaction open): the report is evaluated again from scratch and every
report ends up evaluated once, with each finding once.

Two crash shapes: the whole worker dies (the broker redelivers the unacknowledged
task after its visibility timeout) and only a prefork pool process dies, as the OOM
killer does (Celery then acknowledges the task as failed, and the beat sweep of
unevaluated reports brings the report back).

The kill *before an alert delivery* is covered by the alerts suite:
``tests/alerts/test_alert_worker.py::test_a_worker_killed_before_sending_leads_to_exactly_one_message``
(and ``..._killed_after_sending_causes_one_duplicate_that_the_log_shows`` for the
documented send-then-crash window), so it is not repeated here.
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from django.db.models import F
from faultkit import WAIT_S, run_django, server_env, wait_for

from audit.kb.context import build_contexts
from audit.models import Finding, FindingEvent, RuleFailure, ServerAuditState
from audit.rulebook import current_knowledge_base
from fleet.models import Report
from fleet.tasks import SWEEP_GRACE

pytestmark = [pytest.mark.slow, pytest.mark.worker]

HOSTS = 4
#: Broker visibility timeout of the test workers, seconds (redelivery after the kill).
VISIBILITY_S = 3

_WAITING_BACKEND = """
    SELECT pid FROM pg_stat_activity
    WHERE datname = current_database() AND pid <> pg_backend_pid()
      AND wait_event_type = 'Lock' AND query ILIKE 'INSERT INTO "audit_finding"%'"""


def _post_one_report_per_host(enrolled, make_report, post_report) -> list[Report]:
    ids = []
    for i in range(HOSTS):
        _, token = enrolled(machine_id=f"kill-machine-{i}", hostname=f"kill-node-{i}")
        body = make_report(host={"machine_id": f"kill-machine-{i}", "hostname": f"kill-node-{i}"})
        assert post_report(body, token).status_code == 202
        ids.append(body["report_id"])
    return [Report.objects.get(report_id=i) for i in ids]


@contextmanager
def _findings_blocked(db_url: str) -> Iterator[Callable[[], int]]:
    """Hold a lock that stops every INSERT into audit_finding; yields ``wait_blocked()``
    (the database pid of the evaluation stuck there). On exit the lock is released and
    the stuck backend has gone (its client was killed: it rolls back once unblocked)."""
    url = db_url.replace("postgres://", "postgresql://")
    with psycopg.connect(url) as blocker, psycopg.connect(url, autocommit=True) as watcher:
        blocker.execute("LOCK TABLE audit_finding IN SHARE ROW EXCLUSIVE MODE")
        stuck: list[int] = []

        def wait_blocked() -> int:
            assert wait_for(lambda: watcher.execute(_WAITING_BACKEND).fetchall(), WAIT_S)
            [(pid,)] = watcher.execute(_WAITING_BACKEND).fetchall()
            stuck.append(pid)
            return pid
        yield wait_blocked
        blocker.rollback()
        for pid in stuck:
            assert wait_for(lambda p=pid: not watcher.execute(
                "SELECT 1 FROM pg_stat_activity WHERE pid = %s", (p,)).fetchall(), WAIT_S)


def _evaluated(reports: list[Report]) -> bool:
    return all(Report.objects.get(pk=r.pk).evaluated_at for r in reports)


def _assert_evaluated_once_with_findings_once(reports: list[Report], eval_log: Path) -> None:
    evaluations = Counter(line.split()[0] for line in eval_log.read_text().splitlines())
    assert evaluations == Counter({str(r.report_id): 1 for r in reports})
    expected = {f.rule_id for f in current_knowledge_base().evaluate(
        build_contexts(reports[0].raw, [])[0])}
    assert expected
    for report in reports:
        findings = Finding.objects.filter(host_id=report.host_id)
        assert sorted(findings.values_list("rule_id", flat=True)) == sorted(expected)
        opened = FindingEvent.objects.filter(host_id=report.host_id,
                                             kind=FindingEvent.Kind.OPENED)
        assert sorted(opened.values_list("rule_id", flat=True)) == sorted(expected)
        assert ServerAuditState.objects.filter(server__host_id=report.host_id).count() == 1
        assert Report.objects.get(pk=report.pk).evaluation_error == ""
    assert not RuleFailure.objects.exists()


def test_a_worker_killed_mid_evaluation_leaves_every_report_evaluated_once(
        test_db_url, shared_broker, rules, enrolled, make_report, post_report, worker,
        tmp_path: Path):
    eval_log = tmp_path / "evaluations.log"
    env = {"FAULT_VISIBILITY_S": str(VISIBILITY_S), "FAULT_EVAL_LOG": str(eval_log)}
    with _findings_blocked(test_db_url) as wait_blocked:
        reports = _post_one_report_per_host(enrolled, make_report, post_report)
        first = worker(test_db_url, shared_broker, **env)
        wait_blocked()
        first.kill9()
    assert not eval_log.exists() and not any(_evaluated([r]) for r in reports)

    second = worker(test_db_url, shared_broker, **env)
    assert wait_for(lambda: _evaluated(reports), WAIT_S), second.text()[-3000:]
    _assert_evaluated_once_with_findings_once(reports, eval_log)


def test_a_pool_process_killed_mid_evaluation_leaves_its_report_to_the_sweep(
        test_db_url, shared_broker, rules, enrolled, make_report, post_report, worker,
        tmp_path: Path):
    eval_log = tmp_path / "evaluations.log"
    with _findings_blocked(test_db_url) as wait_blocked:
        reports = _post_one_report_per_host(enrolled, make_report, post_report)
        pool = worker(test_db_url, shared_broker, queues="evaluate,default", pool="prefork",
                      FAULT_EVAL_LOG=str(eval_log))
        wait_blocked()
        [child] = pool.children()
        os.kill(child, signal.SIGKILL)  # what the OOM killer does to a pool process
    # The pool replaces the process and carries on with the other reports.
    assert wait_for(lambda: sum(_evaluated([r]) for r in reports) >= HOSTS - 1,
                    WAIT_S), pool.text()

    # Beat's sweep, once the leftover is older than its grace period (aged, not awaited).
    Report.objects.filter(evaluated_at=None).update(
        received_at=F("received_at") - SWEEP_GRACE - timedelta(seconds=1))
    run_django(server_env(test_db_url, shared_broker),
               "from fleet.tasks import sweep_unevaluated; sweep_unevaluated()")
    assert wait_for(lambda: _evaluated(reports), WAIT_S), pool.text()[-3000:]
    assert pool.alive
    _assert_evaluated_once_with_findings_once(reports, eval_log)
