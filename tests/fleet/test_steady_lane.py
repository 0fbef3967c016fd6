"""The steady lane (fleet.lane): a report that changes nothing but metrics and GPU readings is
applied in the request and not queued, and leaves exactly what the worker would have left;
anything else (a change, an old agent's text body, a report while another awaits evaluation)
still goes through the worker."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from audit.models import Finding, FindingEvent
from audit.tasks import evaluate_report
from fleet.models import ChangeEvent, Gpu, GpuSample, Host, MetricSample, Report, Server
from fleet_agent.metrics_compact import compact
from tests.conftest import iso
from tests.fleet.compact_growth import grown

CAPTURE = (Path(__file__).resolve().parents[2] / "demo" / "data" / "cases" / "metrics"
           / "vllm-benchmarking-fixture_v0.25.1_opt-125m-tp2-loaded.prom")
START = datetime.now(UTC) - timedelta(hours=2)
SAMPLE_COLUMNS = ("ts", "window_kind", "window_s", "kv_cache_usage", "requests_running",
                  "requests_waiting", "generation_tps", "prompt_tps", "ttft_p50_s",
                  "ttft_p99_s", "tpot_p50_s", "itl_p99_s", "preemptions",
                  "prefix_cache_hit_rate", "extra")


@pytest.fixture(autouse=True)
def _no_rate_limit(settings) -> None:
    settings.INGEST_RATE, settings.INGEST_BURST = (1_000_000, 1), 1_000_000


@pytest.fixture
def report_at(make_report):
    """The report of step ``step`` (30 s apart) of a host: the capture's counters growing
    (compact form alone; with the text too when ``form`` says so) and GPU readings moving."""
    base = compact(CAPTURE.read_text())

    def build(host: Host, step: int, form: str = "compact", **server: Any) -> dict[str, Any]:
        at = START + timedelta(seconds=30 * step)
        metrics = {"format": "prometheus-text", "scraped_at": iso(at), "text": "",
                   "compact": grown(base, 1 + step / 10)}
        if form == "text":
            metrics = {"format": "prometheus-text", "scraped_at": iso(at),
                       "text": CAPTURE.read_text()}
        report = make_report(server={"metrics": metrics, **server},
                             host={"machine_id": host.machine_id, "hostname": host.hostname},
                             collected_at=iso(at))
        report["gpus"][0].update(memory_used_bytes=70_000_000_000 + step * 10_000_000,
                                 utilization_gpu_pct=50 + step, temperature_c=60 + step % 3)
        return report
    return build


def _post(post_report, report: dict[str, Any], token: str) -> str:
    response = post_report(report, token=token)
    assert response.status_code == 202, response.content
    return response.json()["report_id"]


def _work(host: Host) -> int:
    """Run the worker's task on the host's reports awaiting evaluation, oldest first; how
    many there were."""
    pending = list(Report.objects.filter(host=host, evaluated_at=None)
                   .order_by("collected_at").values_list("report_id", flat=True))
    for report_id in pending:
        assert evaluate_report.run(str(report_id)) is True
    return len(pending)


def _state(host: Host) -> dict[str, Any]:
    """Everything a user sees of a host after its reports, without row ids and the
    times a row was written."""
    host.refresh_from_db()
    server = Server.objects.get(host=host)
    return {
        "host": (host.last_seen, host.last_collected_at),
        "server": (server.last_seen, server.last_metrics_at, server.last_metrics_snapshot,
                   server.is_running, server.restart_count, server.pid),
        "last_report": server.last_report.collected_at,
        "samples": list(MetricSample.objects.filter(server=server).order_by("ts")
                        .values_list(*SAMPLE_COLUMNS)),
        "gpus": list(Gpu.objects.filter(host=host).values_list(
            "memory_used_bytes", "utilization_pct", "temperature_c", "last_seen")),
        "gpu_samples": list(GpuSample.objects.filter(gpu__host=host).order_by("ts")
                            .values_list("ts", "memory_used_bytes", "utilization_pct",
                                         "temperature_c", "power_draw_w")),
        "events": list(ChangeEvent.objects.filter(host=host).order_by("at", "kind")
                       .values_list("kind", "at")),
        "findings": sorted(Finding.objects.filter(server=server).values_list(
            "rule_id", "status", "first_seen", "last_seen")),
        "finding_events": sorted(FindingEvent.objects.filter(finding__server=server)
                                 .values_list("finding__rule_id", "kind")),
    }


def test_a_steady_report_leaves_what_the_worker_would_have_left(
        settings, enrolled, post_report, report_at):
    """Two hosts send the same reports, one with the lane, one without: the same samples,
    readings, events and findings; the lane host's steady reports were never queued."""
    settings.AUDIT_METRICS_INTERVAL_S = 90  # metric rules due every third report
    settings.AUDIT_METRICS_SPREAD = False  # both hosts due on the same reports
    settings.AUDIT_FINDING_SEEN_REFRESH_S = 90
    lane_host, lane_token = enrolled("machine-lane", "node-lane")
    long_host, long_token = enrolled("machine-long", "node-long")
    queued = {"lane": 0, "long": 0}
    for step in range(12):
        for name, host, token, on in (("lane", lane_host, lane_token, True),
                                      ("long", long_host, long_token, False)):
            settings.INGEST_STEADY_LANE = on
            _post(post_report, report_at(host, step), token)
            queued[name] += _work(host)
    assert queued["long"] == 12
    assert 2 <= queued["lane"] <= 6  # the first report, then one per metric interval
    lane, long = _state(lane_host), _state(long_host)
    assert lane["samples"][-1][1] == "delta" and len(lane["samples"]) == 12
    for key in lane:
        assert lane[key] == long[key], key


def test_a_change_goes_through_the_worker_and_is_recorded(enrolled, post_report, report_at):
    host, token = enrolled()
    for step in range(3):
        _post(post_report, report_at(host, step), token)
        _work(host)
    changed = report_at(host, 3, argv=["vllm", "serve", "google/gemma-4-31B-it",
                                       "--max-model-len", "32768"])
    report_id = _post(post_report, changed, token)
    assert Report.objects.get(report_id=report_id).evaluated_at is None  # queued
    assert _work(host) == 1
    assert ChangeEvent.objects.filter(host=host, kind=ChangeEvent.Kind.CONFIG_CHANGED).exists()
    steady_again = report_at(host, 4, argv=changed["servers"][0]["argv"])
    assert Report.objects.get(report_id=_post(post_report, steady_again, token)).evaluated_at


def test_no_report_overtakes_one_awaiting_evaluation(settings, enrolled, post_report,
                                                      report_at):
    """While a report of the host waits for the worker, the next ones wait too: each is
    evaluated in collected order and leaves its sample (none is taken for a late replay)."""
    host, token = enrolled()
    for step in range(2):
        _post(post_report, report_at(host, step), token)
        _work(host)
    settings.INGEST_STEADY_LANE = False  # this one is queued (a slow worker has not run it)
    waiting = _post(post_report, report_at(host, 2), token)
    settings.INGEST_STEADY_LANE = True
    later = _post(post_report, report_at(host, 3), token)
    assert Report.objects.filter(report_id__in=[waiting, later], evaluated_at=None).count() == 2
    assert _work(host) == 2
    kinds = list(MetricSample.objects.filter(server__host=host).order_by("ts")
                 .values_list("window_kind", flat=True))
    assert kinds == ["lifetime", "delta", "delta", "delta"]
    assert Report.objects.get(report_id=_post(post_report, report_at(host, 4), token)
                              ).evaluated_at  # the worker opened the lane again


def test_an_old_agents_text_body_goes_through_the_worker(enrolled, post_report, report_at):
    host, token = enrolled()
    for step in range(2):
        _post(post_report, report_at(host, step), token)
        _work(host)
    report_id = _post(post_report, report_at(host, 2, form="text"), token)
    assert Report.objects.get(report_id=report_id).evaluated_at is None


def test_a_knowledge_base_change_closes_every_lane(enrolled, post_report, report_at):
    from audit.models import KnowledgeBaseVersion
    from audit.rulebook import requeue_fleet

    host, token = enrolled()
    for step in range(2):
        _post(post_report, report_at(host, step), token)
        _work(host)
    KnowledgeBaseVersion.objects.create(version="kb-next")
    assert requeue_fleet("kb-next") == 1
    report_id = _post(post_report, report_at(host, 2), token)
    assert Report.objects.get(report_id=report_id).evaluated_at is None


def test_a_backlog_keeps_the_lane_deriving_and_queues_behind_the_waiting_report(
        settings, enrolled, post_report, report_at):
    """A report whose metric rules are due waits for a busy worker: the next one is still
    derived in the request (its sample stored) but queued behind it, never marked evaluated
    first, so the due report's metric rules run on it; the lane is open again after."""
    from audit.models import ServerAuditState

    settings.AUDIT_METRICS_INTERVAL_S = 90  # due at step 3, then at step 6
    settings.AUDIT_METRICS_SPREAD = False
    host, token = enrolled()
    for step in range(3):
        _post(post_report, report_at(host, step), token)
        _work(host)
    due, behind = (_post(post_report, report_at(host, step), token) for step in (3, 4))
    rows = {r.report_id.hex: r for r in Report.objects.filter(report_id__in=[due, behind])}
    assert all(r.derived_at and r.evaluated_at is None for r in rows.values())
    assert _work(host) == 2
    state = ServerAuditState.objects.get(server__host=host)
    assert state.metrics_evaluated_at == rows[due.replace("-", "")].collected_at
    assert MetricSample.objects.filter(server__host=host).count() == 5
    assert Report.objects.get(report_id=_post(post_report, report_at(host, 5), token)
                              ).evaluated_at


def test_a_steady_report_still_gets_the_probes_and_the_text_asked_for(
        settings, enrolled, post_report, report_at):
    """The lane answers as the long way does: the live probes due on the host's servers and
    the periodic request for the /metrics text."""
    from fleet.models import ProbePolicy

    host, token = enrolled()
    for step in range(2):
        _post(post_report, report_at(host, step), token)
        _work(host)
    ProbePolicy.objects.create(host=host, names=["stream_control_tokens"], interval_s=3600)
    settings.FLEET_METRICS_TEXT_EVERY_S = 30  # every report's window holds the moment
    response = post_report(report_at(host, 2), token=token)
    answer = response.json()
    assert Report.objects.get(report_id=answer["report_id"]).evaluated_at  # the lane took it
    assert answer["probes"] == [{"server": "port:8000", "names": ["stream_control_tokens"]}]
    assert answer["metrics_text"] == ["*"]


def test_a_steady_report_is_stored_redacted_or_exactly_as_sent(enrolled, post_report,
                                                                report_at):
    """The lane stores the body's text when redaction changed nothing, and the redacted
    document otherwise: a credential in a scrape's label never reaches the database."""
    host, token = enrolled()
    for step in range(2):
        _post(post_report, report_at(host, step), token)
        _work(host)
    clean = report_at(host, 2)
    clean_id = _post(post_report, clean, token)
    stored = Report.objects.get(report_id=clean_id)
    assert stored.evaluated_at is not None  # applied by the lane
    assert stored.raw == clean
    leaky = report_at(host, 3)
    series = leaky["servers"][0]["metrics"]["compact"]["samples"]["vllm:num_requests_running"]
    series[0][0]["model_name"] = "https://svc:hunter2-secret@models.internal/llama"
    leaky_id = _post(post_report, leaky, token)
    stored = Report.objects.get(report_id=leaky_id)
    assert stored.evaluated_at is not None  # the lane took it too (metrics are not in the key)
    assert "hunter2-secret" not in json.dumps(stored.raw)


def test_the_lane_statements_are_prepared_once_per_connection(enrolled, post_report,
                                                              report_at):
    """PostgreSQL parses and plans the lane's read and write once per connection, not on
    every report (Django turns psycopg's preparing off unless the settings ask for it)."""
    from django.db import connection

    host, token = enrolled()
    for step in range(4):
        _post(post_report, report_at(host, step), token)
        _work(host)
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [row[0] for row in cursor.fetchall()]
    assert any("fleet_steadylane l JOIN fleet_host" in s for s in prepared), prepared
    assert any("INSERT INTO fleet_metricsample" in s for s in prepared), prepared


@pytest.mark.parametrize("lane_on", [True, False], ids=["lane", "worker"])
def test_metric_rules_fall_due_once_an_interval_on_the_hosts_own_phase(
        settings, enrolled, post_report, report_at, lane_on):
    """With the spread on (the default outside the tests), a host's metric rules run on the
    reports :mod:`audit.cadence` names, whichever path the report takes: once in every
    period of the interval shifted by the host's phase, never two periods apart."""
    from audit import cadence
    from audit.models import ServerAuditState

    settings.AUDIT_METRICS_INTERVAL_S = 90
    settings.AUDIT_METRICS_SPREAD = True
    settings.INGEST_STEADY_LANE = lane_on
    host, token = enrolled()
    ran, expected, last = [], [], None
    for step in range(16):
        report = report_at(host, step)
        at = datetime.fromisoformat(report["collected_at"].replace("Z", "+00:00"))
        if cadence.metrics_due(last, at, host.pk, 90):
            expected.append(step)
            last = at
        _post(post_report, report, token)
        _work(host)
        state = ServerAuditState.objects.get(server__host=host)
        if state.metrics_evaluated_at == at:
            ran.append(step)
    assert ran == expected
    assert ran[0] == 0 and all(0 < b - a <= 3 for a, b in zip(ran, ran[1:], strict=False))
    assert len(ran) in (5, 6)  # 15 reports x 30 s after the first: five periods of 90 s
