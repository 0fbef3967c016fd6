"""A slot that is down for a cause its failed start establishes is not also told a different
story about the same setting by a configuration finding from when it was starting
(audit.crashloop): one setting, one story, until the server runs again."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from audit import evaluation
from audit.crashloop import FAILED_START_RULE_ID
from audit.models import Finding
from tests.conftest import iso

pytestmark = pytest.mark.django_db

START = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
ARGV = ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--port", "8000",
        "--gpu-memory-utilization", "0.95"]
HEADROOM = "up-gpu-mem-util-no-cudagraph-headroom"  # 0.95 on a release before 0.21.0
FREE_MEMORY = ("ValueError: Free memory on device (50.1/79.6 GiB) on startup is less than "
               "desired GPU memory utilization (0.95, 75.6 GiB). Decrease GPU memory "
               "utilization or reduce GPU memory used by other processes.")
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"


def _post(post_report, token, body) -> None:
    assert post_report(body, token).status_code == 202
    evaluation.evaluate_report(body["report_id"])


def _starting(make_report, minute: int) -> dict:
    return make_report(collected_at=iso(START + timedelta(minutes=minute)), server={
        "argv": ARGV, "base_url": None, "vllm_version": "0.9.1", "pid": 1000 + minute,
        "started_at": iso(START + timedelta(minutes=minute, seconds=-20)),
        "installed_vllm_version": "0.9.1", "models": [], "chat_template": None})


def _down(make_report, minute: int, line: str) -> dict:
    body = make_report(collected_at=iso(START + timedelta(minutes=minute)), failed_starts=[{
        "source": "process", "unit_or_container": "process", "argv": ARGV,
        "restart_count": None, "exit_code": 1, "state": "exited",
        "last_exit_at": iso(START + timedelta(minutes=minute, seconds=-5)),
        "lines": [line], "vllm_version": "0.9.1"}])
    body["servers"] = []
    return body


def test_a_failed_free_memory_check_is_not_also_told_it_boots_then_ooms(
        enrolled, post_report, make_report):
    _, token = enrolled()
    _post(post_report, token, _starting(make_report, 0))
    assert Finding.objects.active().filter(rule_id=HEADROOM).exists()  # seen while starting
    _post(post_report, token, _down(make_report, 1, FREE_MEMORY))
    down = Finding.objects.active().get(rule_id=FAILED_START_RULE_ID)
    assert down.evidence["explanation"]["setting"] == "--gpu-memory-utilization"
    assert not Finding.objects.active().filter(rule_id=HEADROOM).exists()
    _post(post_report, token, _starting(make_report, 2))  # runs again: judged again
    assert Finding.objects.active().filter(rule_id=HEADROOM).exists()


def test_an_out_of_memory_start_keeps_the_finding_that_predicted_it(
        enrolled, post_report, make_report):
    """The OOM the utilisation findings predict is their own story: they stay."""
    _, token = enrolled()
    _post(post_report, token, _starting(make_report, 0))
    _post(post_report, token, _down(make_report, 1, OOM))
    assert Finding.objects.active().filter(rule_id=HEADROOM).exists()
