"""One poisoned agent value breaks neither evaluation nor anybody's pages.

Reports go in through the real ingest API; evaluation runs as the Celery task would; pages
are fetched by a signed-in user.
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from audit import evaluation
from audit.kb.effective import effective_flags
from audit.kb.flags import parse_argv
from audit.tasks import evaluate_report
from fleet.models import Host, Report, Server
from fleet.tasks import sweep_unevaluated

pytestmark = pytest.mark.django_db

POISON_ARGV = ["vllm", "serve", "cyankiwi/gemma-4-31B-it-AWQ-4bit",
               "--gpu-memory-utilization", "nan", "--max-model-len", "9" * 400,
               "--max-num-seqs", "inf", "--max-num-batched-tokens", "9" * 400 + "G",
               "--tensor-parallel-size", "1e999", "--kv-cache-dtype", "fp8"]


@pytest.fixture
def signed_in(client):
    user = get_user_model().objects.create_user("op", password="pw-123456789",
                                                is_staff=True, is_superuser=True)
    client.force_login(user)
    return client


@pytest.fixture
def poisoned(make_report, enrolled, post_report) -> Host:
    _, token = enrolled()
    report = make_report(server={"argv": POISON_ARGV}, deep_extra=_nested(20))
    assert post_report(report, token=token).status_code == 202
    assert evaluate_report(report["report_id"]) is True  # did not raise
    return Host.objects.get()


def _nested(depth: int) -> dict:
    out: dict = {}
    for _ in range(depth):
        out = {"a": out}
    return out


def test_bad_numbers_become_unset_with_a_note() -> None:
    flags, meta = effective_flags(parse_argv(POISON_ARGV), "0.25.1", 80.0,
                                  "NVIDIA H100 80GB HBM3")
    assert isinstance(flags["gpu_memory_utilization"], float)  # vLLM's default again
    assert flags["gpu_memory_utilization"] == flags["gpu_memory_utilization"]  # not NaN
    assert set(meta["invalid"]) >= {"gpu_memory_utilization", "max_model_len", "max_num_seqs",
                                    "max_num_batched_tokens", "tensor_parallel_size"}
    assert "treated as unset" in meta["sources"]["gpu_memory_utilization"]
    assert any("--gpu-memory-utilization 'nan'" in e for e in meta["errors"])


def test_every_page_of_a_poisoned_host_answers(signed_in, poisoned) -> None:
    server = Server.objects.get()
    for url in (f"/hosts/{poisoned.code}/", f"/hosts/{poisoned.code}/recommend/", "/plan/",
                "/plan/fleet/", "/", f"/admin/fleet/server/{server.pk}/change/",
                f"/admin/fleet/report/{Report.objects.get().pk}/change/"):
        response = signed_in.get(url)
        assert response.status_code == 200, url
    assert "nan" in signed_in.get(f"/hosts/{poisoned.code}/").content.decode()


def test_a_nested_extra_field_deeper_than_the_cap_is_refused(make_report, enrolled,
                                                             post_report) -> None:
    _, token = enrolled()
    response = post_report(make_report(deep_extra=_nested(900)), token=token)
    assert response.status_code == 422
    assert response.json()["details"][0]["path"].startswith("deep_extra.a.a")
    assert not Report.objects.exists()


def test_an_evaluation_that_raises_is_recorded_and_retried_a_bounded_number_of_times(
        make_report, enrolled, post_report, monkeypatch, settings) -> None:
    _, token = enrolled()
    report = make_report()
    assert post_report(report, token=token).status_code == 202

    def explode(host, report):
        raise ValueError("poisoned value")

    monkeypatch.setattr(evaluation, "_evaluate_locked", explode)
    Report.objects.update(received_at=Report.objects.get().received_at.replace(year=2025))
    monkeypatch.setattr("audit.tasks.evaluate_report.delay", lambda rid: evaluate_report(rid))
    for attempt in range(1, evaluation.MAX_EVALUATION_ATTEMPTS + 1):
        assert sweep_unevaluated() == 1
        stored = Report.objects.get()
        assert stored.evaluation_attempts == attempt
        assert "poisoned value" in stored.evaluation_error
    assert stored.evaluated_at is not None and "given up" in stored.evaluation_error
    assert sweep_unevaluated() == 0  # never re-enqueued again
