"""A server whose model files hold no chat template and whose command passes none: chat
requests fail. Decided from the agent's own line (it read the files and found none), never
from the model's name; reports are built here."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hostfinding import finding

from audit.kb.templates import absence
from fleet_agent.ondisk import NO_TEMPLATE_IN_FILES

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "recommend"))
from rkit import host_report, serve  # noqa: E402

RULE = "tpl-no-chat-template"
NONE_READ = f"chat template: {NO_TEMPLATE_IN_FILES}HF cache snapshot org/m@abc123"
NOT_READ = "chat template: org/m@main not in HF cache /root/.cache/huggingface/hub"


def _finding(argv: list[str], version: str = "0.11.2", errors: tuple = (NONE_READ,)):
    return finding(RULE, "NVIDIA H100 80GB HBM3", argv, version, count=8, errors=list(errors))


def test_the_agents_line_is_what_decides() -> None:
    assert absence(None, [NONE_READ], {"model": "org/m"})[0] is True
    assert absence(None, [NOT_READ], {"model": "org/m"})[0] is False
    assert absence(None, [], {"model": "org/m"})[0] is False
    found = {"sha256": "a" * 64, "size_bytes": 10, "source": "x"}
    assert absence(found, [NONE_READ], {"model": "org/m"})[0] is False


def test_model_files_without_a_template_and_no_flag_break_chat_requests() -> None:
    found = _finding(serve("org/some-instruct-model"))
    assert found is not None and found.severity == "medium"
    assert "every /v1/chat/completions request fails" in found.message
    assert "--chat-template" in found.remediation


def test_an_encoder_architecture_on_a_release_without_its_mode_names_the_mode() -> None:
    found = _finding(serve("deepseek-ai/DeepSeek-V3.2", "--trust-remote-code"))
    assert found is not None and "--tokenizer-mode deepseek_v32" in found.message


@pytest.mark.parametrize(("argv", "version", "errors"), [
    (serve("org/m", "--chat-template", "/t/chat.jinja"), "0.11.2", (NONE_READ,)),
    (serve("org/m"), "0.11.2", (NOT_READ,)),            # files not read: nothing is known
    (serve("org/m"), "0.11.2", ()),
    (serve("mistralai/Mistral-Small-3.2-24B-Instruct-2506", "--tokenizer-mode", "mistral"),
     "0.11.2", (NONE_READ,)),
    (serve("deepseek-ai/DeepSeek-V3.2"), "0.15.1", (NONE_READ,)),  # vLLM may render it
])
def test_quiet_where_a_template_or_a_renderer_exists_or_nothing_was_read(argv, version, errors):
    assert _finding(argv, version, errors) is None


def test_the_recommended_command_keeps_the_finding_and_says_which_flag_to_add() -> None:
    """The finding and the recommendation tell one story: the recommended command for a
    checkpoint without a template is not called clean of it; it shows the finding next to the
    command with the flag to add, since only the operator knows the template."""
    from advice.recommend import recommend_report
    report = host_report("NVIDIA H100 80GB HBM3", 1, serve("org/some-base-model"),
                         version="0.11.2", template=None)
    report["servers"][0]["errors"] = [NONE_READ]
    out = recommend_report(report)["servers"][0]
    assert out["status"] == "ok"
    assert RULE in out["self_check"]["explained"]
    why = next(e["why"] for e in out["explained"] if e["rule_id"] == RULE)
    assert why.startswith("the command cannot supply the chat template the model was trained")
    assert "--chat-template" in why and not why.endswith("..")
    assert "--chat-template" not in out["replicas"][0]["command"]


def test_a_command_that_passes_a_template_draws_nothing() -> None:
    from advice.recommend import recommend_report
    report = host_report("NVIDIA H100 80GB HBM3", 1,
                         serve("org/some-base-model", "--chat-template", "/t/chat.jinja"),
                         version="0.11.2", template=None)
    report["servers"][0]["errors"] = [NONE_READ]
    out = recommend_report(report)["servers"][0]
    assert RULE not in out["self_check"]["explained"]
    assert "--chat-template /t/chat.jinja" in out["replicas"][0]["command"]
