"""Evaluation of stored reports: findings open, update, resolve, and stay single."""

from __future__ import annotations

import shutil
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from audit import evaluation
from audit.models import Finding, FindingEvent, RuleFailure
from audit.rulebook import RULES_DIR, requeue_fleet, sync_rules
from tests.conftest import iso

pytestmark = pytest.mark.django_db

CEILING = "gemma4-version-ceiling"


@pytest.fixture
def ingest(enrolled, post_report, make_report):
    """POST a report through the API at ``minutes`` past a fixed hour; return its id."""
    host, token = enrolled()
    start = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)

    def send(minutes: int = 0, **server) -> str:
        report = make_report(server=server, collected_at=iso(start + timedelta(minutes=minutes)))
        response = post_report(report, token)
        assert response.status_code == 202, response.content
        return report["report_id"]
    send.host = host
    return send


def _open(rule_id: str) -> Finding:
    return Finding.objects.active().get(rule_id=rule_id)


def test_a_gemma4_server_past_the_ceiling_gets_a_finding_with_evidence(ingest):
    evaluation.evaluate_report(ingest(vllm_version="0.27.0", installed_vllm_version="0.27.0"))

    finding = _open(CEILING)
    assert finding.severity in ("high", "critical")
    assert "0.27.0" in finding.message
    assert finding.evidence
    upstream = "https://github.com/vllm-project/vllm/"
    assert any(ref.startswith(upstream) for ref in finding.references)
    assert FindingEvent.objects.filter(finding=finding, kind="opened").count() == 1


def test_re_evaluating_the_same_report_changes_nothing(ingest):
    report_id = ingest(vllm_version="0.27.0", installed_vllm_version="0.27.0")
    evaluation.evaluate_report(report_id)
    before = (Finding.objects.count(), FindingEvent.objects.count())

    assert evaluation.evaluate_report(report_id) is None
    from fleet.models import Report
    Report.objects.filter(report_id=report_id).update(evaluated_at=None)
    evaluation.evaluate_report(report_id)

    assert (Finding.objects.count(), FindingEvent.objects.count()) == before


def test_a_downgrade_resolves_the_ceiling_finding_and_records_the_version_change(ingest):
    evaluation.evaluate_report(ingest(0, vllm_version="0.27.0", installed_vllm_version="0.27.0"))
    evaluation.evaluate_report(ingest(1, pid=4321, vllm_version="0.25.1",
                                      installed_vllm_version="0.25.1"))

    finding = Finding.objects.get(rule_id=CEILING)
    assert finding.status == Finding.Status.RESOLVED
    change = FindingEvent.objects.get(kind="version_changed")
    assert (change.payload["old"], change.payload["new"]) == ("0.27.0", "0.25.1")
    assert CEILING in change.payload["resolved"]


def test_an_upgrade_event_lists_the_severe_findings_it_opened(ingest):
    evaluation.evaluate_report(ingest(0, vllm_version="0.25.1", installed_vllm_version="0.25.1"))
    evaluation.evaluate_report(ingest(1, pid=4321, vllm_version="0.27.0",
                                      installed_vllm_version="0.27.0"))

    change = FindingEvent.objects.get(kind="version_changed")
    assert CEILING in [f["rule_id"] for f in change.payload["opened"]]


def test_a_pending_upgrade_is_announced_once_with_what_it_would_open(ingest):
    evaluation.evaluate_report(ingest(0, vllm_version="0.25.1", installed_vllm_version="0.27.0"))
    evaluation.evaluate_report(ingest(6, vllm_version="0.25.1", installed_vllm_version="0.27.0"))

    event = FindingEvent.objects.get(kind="pending_upgrade")
    assert event.payload["installed"] == "0.27.0"
    assert CEILING in [f["rule_id"] for f in event.payload["would_open"]]


def test_a_silenced_finding_that_stops_and_fires_again_comes_back_open(ingest, django_user_model):
    user = django_user_model.objects.create_user("op")
    evaluation.evaluate_report(ingest(0, vllm_version="0.27.0", installed_vllm_version="0.27.0"))
    _open(CEILING).silence(user, timezone.now() + timedelta(days=7), "known, upgrade planned")
    evaluation.evaluate_report(ingest(1, pid=2, vllm_version="0.25.1",
                                      installed_vllm_version="0.25.1"))
    evaluation.evaluate_report(ingest(2, pid=3, vllm_version="0.27.0",
                                      installed_vllm_version="0.27.0"))

    assert _open(CEILING).status == Finding.Status.OPEN
    assert Finding.objects.filter(rule_id=CEILING).count() == 2


def test_a_late_replayed_report_does_not_roll_findings_back(ingest):
    newer = ingest(5, vllm_version="0.27.0", installed_vllm_version="0.27.0")
    older = ingest(1, vllm_version="0.25.1", installed_vllm_version="0.25.1")
    evaluation.evaluate_report(newer)
    evaluation.evaluate_report(older)

    assert _open(CEILING)


@pytest.fixture
def rules_copy(tmp_path: Path, settings):
    target = tmp_path / "rules"
    shutil.copytree(RULES_DIR, target)
    settings.AUDIT_RULES_DIR = str(target)
    return target


EXTRA_RULE = """
rules:
  - id: test-any-gemma4
    title: "Any Gemma 4 server"
    kind: pitfall
    severity: low
    cadence: config
    condition: 'model.is_gemma4'
    evidence: {model: 'model.id'}
    message: "{model} is a Gemma 4 model."
    remediation: "Nothing to do; test rule."
    references: ["https://github.com/vllm-project/vllm/issues/1"]
    confirmed_upstream: false
    last_verified: 2026-11-29
  - id: test-broken-rule
    title: "A rule that divides by zero"
    kind: pitfall
    severity: low
    cadence: config
    condition: 'flags.tensor_parallel_size / 0 > 1'
    message: "never rendered"
    remediation: "none"
    references: ["https://github.com/vllm-project/vllm/issues/1"]
    confirmed_upstream: false
    last_verified: 2026-11-29
"""


def test_a_changed_rule_file_re_evaluates_the_fleet(
        ingest, rules_copy, django_capture_on_commit_callbacks):
    evaluation.evaluate_report(ingest(vllm_version="0.25.1", installed_vllm_version="0.25.1"))
    assert not Finding.objects.filter(rule_id="test-any-gemma4").exists()

    (rules_copy / "zz_test.yaml").write_text(EXTRA_RULE)
    version, is_new = sync_rules()
    assert is_new
    with django_capture_on_commit_callbacks() as callbacks:
        assert requeue_fleet(version) == 1
    assert len(callbacks) == 1
    from fleet.models import Report
    evaluation.evaluate_report(Report.objects.get().report_id)

    assert _open("test-any-gemma4").severity == "low"
    assert RuleFailure.objects.filter(rule_id="test-broken-rule").exists()
    assert sync_rules() == (version, False)
    assert requeue_fleet(version) == 0


def test_a_report_for_an_unknown_id_is_ignored():
    assert evaluation.evaluate_report(uuid.uuid4()) is None


def test_a_steady_report_refreshes_last_seen_without_re_running_the_rules(ingest, settings):
    from audit.models import ServerAuditState

    settings.AUDIT_FINDING_SEEN_REFRESH_S = 120  # bounded staleness (audit.steady)
    evaluation.evaluate_report(ingest(0, vllm_version="0.27.0", installed_vllm_version="0.27.0"))
    state = ServerAuditState.objects.get()
    events = FindingEvent.objects.count()
    outcomes = evaluation.evaluate_report(
        ingest(1, vllm_version="0.27.0", installed_vllm_version="0.27.0"))

    assert outcomes[0].cadences == []
    assert ServerAuditState.objects.get().config_evaluated_at == state.config_evaluated_at
    assert FindingEvent.objects.count() == events
    # 60 s old: within the bound, not rewritten
    assert _open(CEILING).last_seen == datetime(2026, 11, 29, 8, 0, tzinfo=UTC)
    third = ingest(2, vllm_version="0.27.0", installed_vllm_version="0.27.0")
    assert evaluation.evaluate_report(third)[0].cadences == []
    assert _open(CEILING).last_seen == datetime(2026, 11, 29, 8, 2, tzinfo=UTC)  # 120 s: now
    assert str(_open(CEILING).last_report.report_id) == str(third)


def test_every_steady_report_refreshes_last_seen_when_the_bound_is_zero(ingest, settings):
    settings.AUDIT_FINDING_SEEN_REFRESH_S = 0
    evaluation.evaluate_report(ingest(0, vllm_version="0.27.0", installed_vllm_version="0.27.0"))
    evaluation.evaluate_report(ingest(1, vllm_version="0.27.0", installed_vllm_version="0.27.0"))
    assert _open(CEILING).last_seen == datetime(2026, 11, 29, 8, 1, tzinfo=UTC)


def test_a_late_replay_of_a_steady_host_changes_no_finding(ingest):
    from fleet.models import Report

    evaluation.evaluate_report(ingest(0, vllm_version="0.27.0", installed_vllm_version="0.27.0"))
    late = ingest(1, vllm_version="0.27.0", installed_vllm_version="0.27.0")
    evaluation.evaluate_report(ingest(2, vllm_version="0.27.0", installed_vllm_version="0.27.0"))
    seen = _open(CEILING).last_seen

    assert evaluation.evaluate_report(late) == []
    assert Report.objects.get(report_id=late).evaluated_at is not None
    assert _open(CEILING).last_seen == seen
    assert evaluation.evaluate_report(late) is None  # evaluated once


def test_metric_rules_run_again_once_the_window_has_elapsed(ingest, settings):
    settings.AUDIT_METRICS_INTERVAL_S = 300
    evaluation.evaluate_report(ingest(0, vllm_version="0.25.1", installed_vllm_version="0.25.1"))
    assert evaluation.evaluate_report(
        ingest(2, vllm_version="0.25.1", installed_vllm_version="0.25.1"))[0].cadences == []
    later = evaluation.evaluate_report(
        ingest(6, vllm_version="0.25.1", installed_vllm_version="0.25.1"))
    assert later[0].cadences == ["metrics"]


def test_a_second_bare_restart_within_a_day_escalates_the_restart_finding(ingest):
    rule = "restart-without-config-change"
    evaluation.evaluate_report(ingest(0, pid=100))
    evaluation.evaluate_report(ingest(10, pid=101, started_at="2026-11-29T08:09:00Z"))
    first = _open(rule)
    assert first.severity == "medium"
    evaluation.evaluate_report(ingest(20, pid=102, started_at="2026-11-29T08:19:00Z"))

    assert _open(rule).severity == "high"
    assert _open(rule).evidence["restarts"] == 2
