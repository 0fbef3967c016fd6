"""Stored upgrade plans: the worker plans a server when its configuration was
evaluated, the planner pages read those rows without evaluating, and a rule or configuration
change never leaves a stale plan on a page."""

from __future__ import annotations

import copy
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from advice import planner, plans
from advice.models import ServerPlan
from audit import tasks
from audit.rulebook import RULES_DIR, current_knowledge_base, requeue_fleet, sync_rules
from fleet.models import Report, Server
from tests.conftest import iso

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.recommend_pages.urls")]

GEMMA_ARGV = ["vllm", "serve", "cyankiwi/gemma-4-31B-it-AWQ-4bit", "--tensor-parallel-size",
              "2", "--max-model-len", "262144", "--max-num-seqs", "256"]
START = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)

#: A critical rule for vLLM 0.27.0 and later: planning 0.25.1 -> 0.27.0 becomes "blocked".
BLOCKING_RULE = """
rules:
  - id: test-blocks-0-27
    title: "Test rule: 0.27.0 and later crash here"
    kind: pitfall
    severity: critical
    cadence: config
    condition: 'version_ge(vllm.version, "0.27.0")'
    message: "vLLM 0.27.0 or later crashes here (test rule)."
    remediation: "none"
    references: ["https://github.com/vllm-project/vllm/issues/1"]
    confirmed_upstream: false
    last_verified: 2026-11-29
"""


@pytest.fixture(autouse=True)
def plans_task_inline():
    """Run ``advice.tasks.store_server_plans`` where it is queued, as a worker would next."""
    from config.celery import app

    before = app.conf.task_always_eager
    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = before




@pytest.fixture
def rules_copy(tmp_path: Path, settings) -> Path:
    """The built-in rules in a folder the test may edit (AUDIT_RULES_DIR)."""
    target = tmp_path / "rules"
    shutil.copytree(RULES_DIR, target)
    settings.AUDIT_RULES_DIR = str(target)
    return target


@pytest.fixture
def send(enrolled, post_report, make_report):
    """POST a report of host ``machine`` (one Gemma 4 server per port in ``ports``) at
    ``minutes`` past START; returns the report id (stored and derived, not evaluated)."""
    tokens: dict[str, str] = {}

    def post(minutes: int = 0, machine: str = "machine-1", ports: tuple[int, ...] = (8000,),
             **server) -> str:
        if machine not in tokens:
            tokens[machine] = enrolled(machine_id=machine, hostname=f"node-{machine}")[1]
        report = make_report(host={"machine_id": machine, "hostname": f"node-{machine}"},
                             collected_at=iso(START + timedelta(minutes=minutes)))
        template = {**report["servers"][0], "argv": GEMMA_ARGV, "vllm_version": "0.25.1",
                    "installed_vllm_version": "0.25.1", **server}
        report["servers"] = [
            {**copy.deepcopy(template), "pid": 1000 + port - 8000,
             "argv": [*template["argv"], "--port", str(port)],
             "base_url": f"http://127.0.0.1:{port}"} for port in ports]
        assert post_report(report, token=tokens[machine]).status_code == 202
        return report["report_id"]
    return post


@pytest.fixture
def evaluations(plan_calls):
    """Targets the planner evaluated (tests/recommend_pages/conftest.py)."""
    return plan_calls


def _fleet(client) -> dict[str, dict]:
    response = client.get("/plan/fleet/")
    assert response.status_code == 200
    return {row["target"]: row for row in response.context["rows"]}


def _plan(client, target: str = "0.27.1") -> list[dict]:
    response = client.get(f"/plan/?target={target}")
    assert response.status_code == 200
    return list(response.context["plans"])


def _verdicts(rows: dict[str, dict]) -> dict[str, tuple[int, int, int]]:
    return {t: (r["blocked"], r["risky"], r["safe"]) for t, r in rows.items()}


def test_the_worker_stores_every_known_release_and_the_pages_read_them_unevaluated(
        signed_in, send, evaluations):
    assert tasks.evaluate_report(send(installed_vllm_version="0.27.1"))
    server = Server.objects.get()
    known = planner.known_versions(current_knowledge_base())
    rows = ServerPlan.objects.filter(server=server)
    assert sorted(r.target for r in rows if not r.pending) == sorted(known)
    assert [r.target for r in rows if r.pending] == ["0.27.1"]
    assert len(evaluations) == len(known) + 1  # each release + the pending upgrade, once

    evaluations.clear()
    stored_fleet, stored_plan = _fleet(signed_in), _plan(signed_in)
    body = signed_in.get("/plan/?target=0.28.0").content.decode()
    assert evaluations == []  # no visit evaluated
    assert "RISKY" in body and "will become 0.27.1 on next restart" in body
    assert "https://github.com/vllm-project/vllm/issues/50477" in body

    # The same verdicts as a page that plans everything itself (no stored rows).
    ServerPlan.objects.all().delete()
    assert _verdicts(_fleet(signed_in)) == _verdicts(stored_fleet)
    planned = _plan(signed_in)
    assert [(p["verdict"], p["reasons"], p["appear"]) for p in planned] == \
        [(p["verdict"], p["reasons"], p["appear"]) for p in stored_plan]
    assert evaluations  # that visit did evaluate


def test_a_report_with_nothing_new_plans_nothing(signed_in, send, evaluations):
    tasks.evaluate_report(send(0))
    before = list(ServerPlan.objects.values_list("pk", "planned_at"))
    evaluations.clear()
    tasks.evaluate_report(send(1))  # same configuration, same process, a minute later

    assert evaluations == []
    assert list(ServerPlan.objects.values_list("pk", "planned_at")) == before


def test_a_restart_or_an_identical_server_reuses_plans_without_evaluating(send, evaluations):
    tasks.evaluate_report(send(0))
    evaluations.clear()
    tasks.evaluate_report(send(1, pid=4242, started_at=iso(START)))  # bare restart
    tasks.evaluate_report(send(2, machine="machine-2", ports=(8000, 8001)))  # same config

    assert evaluations == []
    assert ServerPlan.objects.values("server").distinct().count() == 3
    for server in Server.objects.all():
        plan = ServerPlan.objects.get(server=server, target="0.27.1").plan
        assert (plan["pid"], plan["base_url"]) == (server.pid, server.base_url)


def test_a_config_change_replaces_the_stored_plan(signed_in, send):
    tasks.evaluate_report(send(0))
    assert {p["current"] for p in _plan(signed_in)} == {"0.25.1"}
    # Until the new report is evaluated the page shows the plan of the evaluated config.
    report_id = send(5, vllm_version="0.26.0", installed_vllm_version="0.26.0")
    assert {p["current"] for p in _plan(signed_in)} == {"0.25.1"}

    tasks.evaluate_report(report_id)
    assert {p["current"] for p in _plan(signed_in)} == {"0.26.0"}
    stored = ServerPlan.objects.get(target="0.27.1")
    report = Report.objects.get(report_id=report_id).raw
    truth = planner.plan_server(report["servers"][0], report, "0.27.1",
                                kb=current_knowledge_base())
    assert (stored.verdict, stored.plan["appear"]) == (truth["verdict"], truth["appear"])


def test_a_rule_change_never_shows_the_plan_of_the_old_rules(signed_in, send, rules_copy,
                                                             evaluations,
                                                             django_capture_on_commit_callbacks):
    tasks.evaluate_report(send(0))
    assert _fleet(signed_in)["0.27.1"]["blocked"] == 0
    assert ServerPlan.objects.get(target="0.27.1").verdict != "blocked"

    (rules_copy / "zz_test_block.yaml").write_text(BLOCKING_RULE)
    # Before the worker caught up: the old rows are not current, the page plans itself.
    evaluations.clear()
    assert _fleet(signed_in)["0.27.1"]["blocked"] == 1
    assert [p["verdict"] for p in _plan(signed_in)] == ["blocked"]
    assert evaluations

    version, is_new = sync_rules()
    with django_capture_on_commit_callbacks():
        assert is_new and requeue_fleet(version) == 1
    assert tasks.evaluate_report(Report.objects.get().report_id)
    stored = ServerPlan.objects.get(target="0.27.1")
    assert (stored.kb_version, stored.verdict) == (version, "blocked")
    evaluations.clear()
    assert _fleet(signed_in)["0.27.1"]["blocked"] == 1 and evaluations == []


def test_a_release_added_to_the_timeline_is_planned_for_every_server(signed_in, send,
                                                                      evaluations,
                                                                      monkeypatch):
    tasks.evaluate_report(send(0, ports=(8000, 8001)))
    assert not ServerPlan.objects.filter(target="0.27.0").exists()
    # A new version of this code lists 0.27.0 (not in the timeline today).
    known = planner.known_versions
    monkeypatch.setattr(planner, "known_versions", lambda kb=None: ["0.27.0", *known(kb)])
    evaluations.clear()
    tasks.evaluate_report(send(0, machine="machine-2", vllm_version="0.26.0",
                               installed_vllm_version="0.26.0"))
    assert ServerPlan.objects.filter(target="0.27.0", pending=False).count() == 3
    # machine-2 planned in full, machine-1's two identical servers once for the new target
    assert evaluations.count("0.27.0") == 2

    evaluations.clear()
    plans_to = {p["current"]: p["verdict"] for p in _plan(signed_in, "0.27.0")}
    assert evaluations == []
    assert plans_to["0.25.1"] == "risky"  # the Gemma 4 ceiling, as test_pages shows


@pytest.mark.parametrize("limit", [("LAZY_CONFIGURATIONS", 1), ("LAZY_SECONDS", 0)],
                         ids=["count", "time"])
def test_a_visit_plans_a_bounded_number_of_configurations(signed_in, send, monkeypatch, limit):
    monkeypatch.setattr(plans, *limit)
    send(0)  # never evaluated: nothing stored
    send(0, machine="machine-2", argv=[*GEMMA_ARGV, "--max-num-seqs", "64"])

    first = signed_in.get("/plan/fleet/?candidates=0.27.0")
    assert first.context["rows"][0]["servers"] == 1
    assert "1 server not planned yet" in first.content.decode()
    second = signed_in.get("/plan/fleet/?candidates=0.27.0")  # the first one is memoised
    assert second.context["rows"][0]["servers"] == 2
    assert "not planned yet" not in second.content.decode()
    # The planner page also needs each server's pending upgrade: one more per visit.
    page = signed_in.get("/plan/?target=0.27.0")
    assert len(page.context["plans"]) == 2
    assert "1 server not planned yet" in page.content.decode()


def test_a_planning_failure_leaves_the_evaluation_done(send, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("planner bug")
    monkeypatch.setattr(planner, "plan_server", broken)
    report_id = send(0)

    assert tasks.evaluate_report(report_id) is True
    assert Report.objects.get(report_id=report_id).evaluated_at is not None
    assert not ServerPlan.objects.exists()


def test_a_long_server_list_reads_the_rows_of_the_running_fleet(signed_in, send, monkeypatch,
                                                                  evaluations):
    tasks.evaluate_report(send(0, ports=(8000, 8001)))
    tasks.evaluate_report(send(0, machine="machine-2", vllm_version="0.26.0",
                               installed_vllm_version="0.26.0"))
    monkeypatch.setattr(plans, "MAX_NAMED_SERVERS", 0)  # every list is "long"
    evaluations.clear()
    one = Server.objects.get(host__machine_id="machine-2")

    assert [p["server"] for p in _plan_of(signed_in, f"server={one.pk}")] == [one]
    assert len(_plan_of(signed_in, "model=gemma-4")) == 3
    assert _fleet(signed_in)["0.27.1"]["servers"] == 3 and evaluations == []


def _plan_of(client, scope: str, target: str = "0.27.1") -> list[dict]:
    response = client.get(f"/plan/?{scope}&target={target}")
    assert response.status_code == 200
    return list(response.context["plans"])


def test_store_plans_fills_a_fleet_evaluated_before_plans_were_stored(signed_in, send,
                                                                      evaluations):
    import io

    from django.core.management import call_command

    from audit import evaluation

    evaluation.evaluate_report(send(0, ports=(8000, 8001)))  # no task, no signal: no plans
    assert not ServerPlan.objects.exists()
    out = io.StringIO()
    call_command("store_plans", stdout=out)

    assert "planned 2 servers (1 configuration(s) evaluated)" in out.getvalue()
    evaluations.clear()
    assert _fleet(signed_in)["0.27.1"]["servers"] == 2 and evaluations == []


def test_findings_are_stored_before_and_without_their_plans(send, evaluations):
    """The evaluation queues the planning as its own task (~100 ms a new configuration):
    the findings are committed and announced first; the plans arrive when a worker runs
    the queued task."""
    from audit.models import Finding
    from config.celery import app

    app.conf.task_always_eager = False
    queue = app.conf.task_default_queue
    with app.connection_for_write() as conn:
        redis = conn.default_channel.client
        redis.delete(queue)
        report_id = send(0, installed_vllm_version="0.27.1")
        assert tasks.evaluate_report(report_id)
        queued = [m for m in redis.lrange(queue, 0, -1) if b"store_server_plans" in m]
        redis.delete(queue)
    assert Finding.objects.exists() and len(queued) == 1
    assert not ServerPlan.objects.exists() and evaluations == []

    from advice.tasks import store_server_plans

    assert store_server_plans.apply(args=(report_id, [Server.objects.get().pk])).get() == 1
    assert ServerPlan.objects.filter(pending=True).get().target == "0.27.1"
