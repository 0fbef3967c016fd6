"""Accepted reports: 202, stored once per report_id (also under concurrency), evaluation queued."""

from __future__ import annotations

import threading

import pytest
from django.db import connection
from django.test import Client

from fleet.models import Gpu, Host, Report, Server
from fleet.recording import derive_report


@pytest.mark.django_db
def test_it_accepts_a_contract_report_and_upserts_host_servers_and_gpus(
        post_report, make_report, enrolled):
    _, token = enrolled()
    report = make_report(host={"hostname": "renamed-node"})
    response = post_report(report, token=token)
    assert response.status_code == 202
    assert response.json() == {"report_id": report["report_id"], "duplicate": False,
                               "metrics_compact": True}
    stored = Report.objects.get()
    assert str(stored.report_id) == report["report_id"]
    assert stored.raw == report
    host = Host.objects.get()
    assert (host.hostname, host.reported_hostname) == ("gpu-node-1", "renamed-node")
    assert host.agent_interval_s == 30
    server = Server.objects.get()
    assert (server.identity, server.vllm_version, server.pid) == ("port:8000", "0.25.1", 1234)
    assert server.chat_template_sha256 == "a" * 64
    assert server.last_report == stored
    assert Gpu.objects.get().name == "NVIDIA H100 80GB HBM3"


@pytest.mark.django_db
def test_it_accepts_a_gzip_encoded_report(post_report, make_report, enrolled):
    _, token = enrolled()
    assert post_report(make_report(), token=token, gzipped=True).status_code == 202
    assert Report.objects.count() == 1


@pytest.mark.django_db
def test_it_accepts_a_report_with_only_the_minimum_fields(post_report, make_report, enrolled):
    _, token = enrolled()
    report = make_report()
    report["servers"] = [{"pid": 7, "argv": ["vllm", "serve", "m"]}]
    del report["gpus"], report["gpu_error"]
    assert post_report(report, token=token).status_code == 202
    assert Server.objects.get().identity == "port:8000"


@pytest.mark.django_db
def test_a_resent_report_is_accepted_and_stored_once(post_report, make_report, enrolled):
    _, token = enrolled()
    report = make_report()
    first = post_report(report, token=token)
    again = post_report(report, token=token)
    assert (first.status_code, again.status_code) == (202, 202)
    assert again.json()["duplicate"] is True
    assert Report.objects.count() == 1


@pytest.mark.django_db(transaction=True)  # autocommit: ingest's own INSERT statement
def test_an_autocommitted_report_is_stored_raw_once_with_its_fields(post_report, make_report,
                                                                     enrolled):
    host, token = enrolled()
    report = make_report(future_field={"x": 1})
    first = post_report(report, token=token)
    again = post_report(report, token=token)
    assert first.json() == {"report_id": report["report_id"], "duplicate": False,
                            "metrics_compact": True}
    assert again.json() == {"report_id": report["report_id"], "duplicate": True,
                            "metrics_compact": True}
    row = Report.objects.get()
    assert (row.host_id, row.schema_version, row.raw["future_field"]) == (host.pk, 1, {"x": 1})
    assert row.collected_at.isoformat().startswith(report["collected_at"][:19])
    assert (row.evaluated_at, row.derived_at, row.keep, row.evaluation_attempts) == (
        None, None, False, 0)
    assert row.received_at is not None


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_posts_of_one_report_store_one_row(make_report, enrolled):
    _, token = enrolled()
    report = make_report()
    import json

    body = json.dumps(report).encode()
    statuses: list[int] = []
    barrier = threading.Barrier(2)

    def send() -> None:
        try:
            barrier.wait(timeout=10)
            response = Client().post("/api/v1/reports", body, content_type="application/json",
                                     headers={"Authorization": f"Bearer {token}"})
            statuses.append(response.status_code)
        finally:
            connection.close()  # each thread has its own connection

    threads = [threading.Thread(target=send) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert statuses == [202, 202]
    assert Report.objects.filter(report_id=report["report_id"]).count() == 1
    assert derive_report(report["report_id"]) is True  # the worker's step, once
    assert derive_report(report["report_id"]) is False
    assert Server.objects.count() == 1


@pytest.mark.django_db
def test_accepting_a_report_queues_its_evaluation_after_commit(
        post_report, make_report, enrolled, django_capture_on_commit_callbacks, monkeypatch):
    from audit.tasks import evaluate_report

    queued: list[str] = []
    monkeypatch.setattr(evaluate_report, "delay", lambda report_id: queued.append(report_id))
    _, token = enrolled()
    report = make_report()
    with django_capture_on_commit_callbacks(execute=True):
        assert post_report(report, token=token).status_code == 202
    assert queued == [report["report_id"]]


@pytest.mark.django_db
def test_a_broker_outage_still_stores_the_report_and_answers_202(
        post_report, make_report, enrolled, django_capture_on_commit_callbacks, monkeypatch):
    from kombu.exceptions import OperationalError

    from audit.tasks import evaluate_report

    def broker_down(report_id: str) -> None:
        raise OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(evaluate_report, "delay", broker_down)
    _, token = enrolled()
    with django_capture_on_commit_callbacks(execute=True):
        response = post_report(make_report(), token=token)
    assert response.status_code == 202
    assert Report.objects.get().evaluated_at is None  # left for the beat sweep


@pytest.mark.django_db
def test_the_openapi_schema_documents_both_agent_endpoints(client):
    schema = client.get("/api/openapi.json").json()
    assert {"/api/v1/enroll", "/api/v1/reports"} <= set(schema["paths"])
    assert client.get("/api/docs").status_code == 200


@pytest.mark.django_db
def test_the_health_endpoint_reports_the_database_ok(client):
    assert client.get("/api/v1/health").json() == {"status": "ok"}
