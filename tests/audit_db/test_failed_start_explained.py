"""A failed start no rule knows is explained from vLLM's own checks, the same way on the
finding, the crash-loop finding and the host page: the setting, its value, the change and the
fixed command. Lines are a real vLLM 0.32.0 capture (tests/data/real_vllm/0.32.0)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from audit import evaluation
from audit.crashloop import CRASH_LOOP_RULE_ID, FAILED_START_RULE_ID
from audit.models import Finding
from fleet.access import set_role
from fleet.models import Server
from fleet_agent.failed_starts import clean_lines
from tests.conftest import iso

pytestmark = pytest.mark.django_db

CAPTURE = json.loads((Path(__file__).parents[1] / "data" / "real_vllm" / "0.32.0"
                      / "failed_starts" / "flag_typo.json").read_text())
START = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)


def _failed(minutes: int, version: str | None = "0.32.0") -> dict:
    return {"source": "process", "unit_or_container": "process", "argv": CAPTURE["argv"],
            "restart_count": None, "exit_code": None, "state": "exited",
            "last_exit_at": iso(START + timedelta(minutes=minutes, seconds=-5)),
            "lines": clean_lines(CAPTURE["log_tail"]), "vllm_version": version}


def test_a_typo_is_explained_everywhere_with_the_fixed_command(enrolled, post_report,
                                                               make_report, client,
                                                               django_user_model):
    _, token = enrolled()
    for minute in range(4):  # a host whose every report is this crash: a loop
        body = make_report(collected_at=iso(START + timedelta(minutes=minute)),
                           failed_starts=[_failed(minute)])
        body["servers"] = []
        assert post_report(body, token).status_code == 202
        evaluation.evaluate_report(body["report_id"])

    server = Server.objects.get()
    assert server.installed_vllm_version == "0.32.0"  # from the failed start itself
    # the rule on unrecognised arguments matches and keeps its place; it carries the fix
    down = Finding.objects.active().get(evidence__failed_start=True,
                                        evidence__signature_rule__isnull=False)
    assert not Finding.objects.active().filter(rule_id=FAILED_START_RULE_ID).exists()
    explained = down.evidence["explanation"]
    assert explained["setting"] == "--max-num-seqz" and "--max-num-seqs" in explained["change"]
    assert "--max-num-seqs 8" in explained["fix_command"]
    assert "--max-num-seqz" in explained["failing_command"]
    assert explained["fix_command"] in down.remediation
    loop = Finding.objects.active().get(rule_id=CRASH_LOOP_RULE_ID)
    assert explained["fix_command"] in loop.remediation
    assert loop.evidence["explanation"] == explained

    user = django_user_model.objects.create_user("viewer-1")
    set_role(user, "viewer")
    client.force_login(user)
    page = client.get(f"/hosts/{server.host.code}/").content.decode()
    assert "--max-num-seqs 8" in page and "Fixed command" in page


FORK = ["INFO 08-05 10:00:00 llm_engine.py:176] Initializing an LLM engine (v0.5.3.post1)",
        "(VllmWorkerProcess pid=81) ERROR Exception in worker VllmWorkerProcess while "
        "processing method init_device: Cannot re-initialize CUDA in forked subprocess. To "
        "use CUDA with multiprocessing, you must use the 'spawn' start method"]
CUDART = ["Traceback (most recent call last):",
          "ImportError: libcudart.so.12: cannot open shared object file: No such file or "
          "directory"]


@pytest.mark.parametrize(("lines", "version", "words"), [
    (FORK, "0.5.3.post1", "VLLM_WORKER_MULTIPROC_METHOD=spawn"),
    (CUDART, "0.2.2", "built for CUDA 12"),
])
def test_an_environment_or_installation_cause_reaches_the_finding(
        enrolled, post_report, make_report, lines, version, words):
    _, token = enrolled()
    failed = {**_failed(0, version), "lines": lines,
              "argv": ["vllm", "serve", "m/x", "--tensor-parallel-size", "2"]}
    body = make_report(collected_at=iso(START), failed_starts=[failed])
    body["servers"] = []
    assert post_report(body, token).status_code == 202
    evaluation.evaluate_report(body["report_id"])
    down = Finding.objects.active().get(rule_id=FAILED_START_RULE_ID)
    text = " ".join([down.title, down.message, down.remediation])
    assert words in text, text
    assert down.evidence["explanation"]["kind"] in ("environment", "installation")
