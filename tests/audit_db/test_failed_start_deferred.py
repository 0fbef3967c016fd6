"""A failed start's finding says only what its explanation knows: a setting left at vLLM's
default is not "your setting", a registered architecture that failed to load stays medium,
and a config finding that already names the cause is not contradicted (audit.crashloop)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from audit import evaluation
from audit.crashloop import FAILED_START_RULE_ID
from audit.models import Finding
from audit.rulebook import current_knowledge_base
from fleet.access import set_role
from fleet.models import Server
from tests.audit.test_failed_start_precision import NVFP4_MLA
from tests.conftest import iso

pytestmark = pytest.mark.django_db

START = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
ARGV = ["vllm", "serve", "deepseek-ai/DeepSeek-V3", "--port", "8000"]


def _report(make_report, minute: int, line: str, argv: list[str]) -> dict:
    body = make_report(collected_at=iso(START + timedelta(minutes=minute)), failed_starts=[{
        "source": "process", "unit_or_container": "process", "argv": argv,
        "restart_count": None, "exit_code": 1, "state": "exited",
        "last_exit_at": iso(START + timedelta(minutes=minute, seconds=-5)),
        "lines": [line], "vllm_version": "0.32.0"}])
    body["servers"] = []
    return body


def _host_page(client, django_user_model) -> str:
    user = django_user_model.objects.create_user("viewer-1")
    set_role(user, "viewer")
    client.force_login(user)
    return client.get(f"/hosts/{Server.objects.get().host.code}/").content.decode()


def _post(body, token, post_report) -> None:
    assert post_report(body, token).status_code == 202
    evaluation.evaluate_report(body["report_id"])


def test_a_default_is_not_called_the_operators_setting(enrolled, post_report, make_report,
                                                        client, django_user_model):
    _, token = enrolled()
    assert not current_knowledge_base().match_log([NVFP4_MLA])
    _post(_report(make_report, 0, NVFP4_MLA, ARGV), token, post_report)
    down = Finding.objects.active().get(rule_id=FAILED_START_RULE_ID)
    assert "Your setting" not in down.message
    assert "--kv-cache-dtype, left at vLLM's default (auto)" in down.message
    assert down.evidence["explanation"]["operator_set"] is False
    page = _host_page(client, django_user_model)  # the host page says the same
    assert "Your setting" not in page and "left at vLLM&#x27;s default" in page


def test_a_config_finding_that_names_the_cause_is_not_contradicted(enrolled, post_report,
                                                                   make_report, client,
                                                                   django_user_model):
    _, token = enrolled()
    _post(_report(make_report, 0, NVFP4_MLA, ARGV), token, post_report)
    server = Server.objects.get()
    config_rule = next(r for r in current_knowledge_base().rules if r.severity == "high")
    Finding.objects.create(host=server.host, server=server, rule_id=config_rule.id,
                           kind=config_rule.kind, severity="high", title=config_rule.title,
                           message="a config rule of the knowledge base fired")
    _post(_report(make_report, 1, NVFP4_MLA, ARGV), token, post_report)
    down = Finding.objects.active().get(rule_id=FAILED_START_RULE_ID)
    # vLLM's own message still shows; no sentence of ours names a setting as the cause
    assert "--kv-cache-dtype" not in down.remediation
    assert "The check read" not in down.message and "Your setting" not in down.message
    assert config_rule.id in down.message and "For this start" not in down.remediation
    assert down.evidence["explanation_deferred_to"] == [config_rule.id]
    assert down.evidence["explanation"]["setting"] == "--kv-cache-dtype"  # evidence only
    page = _host_page(client, django_user_model)
    assert "evidence only" in page and "Setting read" not in page

    # the operator's own setting fed the check: the explanation stands beside the rule
    mine = [*ARGV, "--kv-cache-dtype", "nvfp4"]
    _post(_report(make_report, 2, NVFP4_MLA, mine), token, post_report)
    down = Finding.objects.active().get(rule_id=FAILED_START_RULE_ID)
    assert "Your setting --kv-cache-dtype = nvfp4" in down.message
    assert "explanation_deferred_to" not in down.evidence


def test_a_registered_architecture_that_failed_to_load_is_medium(enrolled, post_report,
                                                                 make_report):
    _, token = enrolled()
    line = "ValueError: Model architectures ['LlamaForCausalLM'] are not supported for now."
    assert not current_knowledge_base().match_log([line])
    _post(_report(make_report, 0, line, ARGV), token, post_report)
    down = Finding.objects.active().get(rule_id=FAILED_START_RULE_ID)
    assert down.severity == "medium" and "registers LlamaForCausalLM" in down.title
    assert "upgrade" not in down.remediation.lower()
