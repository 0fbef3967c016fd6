"""A served model without a chat template (audit/kb/templates.py ``absence``, rule
tpl-no-chat-template): the agent's own finding that the model's tokenizer files hold none,
read by the dashboard as "every chat request fails". Reports are built here; the agent side
runs the real ``fleet_agent.ondisk.chat_template`` over an in-memory model directory."""

from __future__ import annotations

import pytest

from audit.kb.context import build_context
from audit.kb.engine import load_rules
from audit.kb.flags import parse_argv
from audit.kb.templates import absence
from fleet_agent import ondisk
from fleet_agent.discovery import ServerProcess

H100 = {"index": 0, "uuid": "GPU-0", "name": "NVIDIA H100 80GB HBM3",
        "memory_total_bytes": 85520809984, "compute_capability": "9.0"}
RULE = "tpl-no-chat-template"
NONE_LOCAL = f"chat template: {ondisk.NO_TEMPLATE_IN_FILES}local model directory /models/base-7b"


@pytest.fixture(scope="module")
def kb():
    return load_rules()


def _fired(kb, argv: list[str], errors: list[str], template: dict | None = None) -> dict:
    server = {"pid": 1, "base_url": "http://127.0.0.1:8000", "vllm_version": "0.32.0",
              "installed_vllm_version": "0.32.0", "argv": argv, "chat_template": template,
              "errors": errors, "models": [{"id": argv[2]}]}
    report = {"host": {"hostname": "h"}, "gpus": [H100], "servers": [server]}
    return {f.rule_id: f for f in kb.evaluate(build_context(server, report))}


def _agent_errors(files: dict[str, bytes], argv: list[str], monkeypatch) -> list[str]:
    """What the agent reports for a server whose model directory holds ``files``."""
    monkeypatch.setattr(ondisk, "read_in_process",
                        lambda root, server, path, limit=0: files.get(path))
    server = ServerProcess(pid=7, argv=argv, serve_index=2)
    found, error = ondisk.chat_template(None, server)
    return [] if found else [f"chat template: {error}"]


def test_a_model_directory_without_a_template_fails_every_chat_request(kb, monkeypatch):
    argv = ["vllm", "serve", "/models/base-7b"]
    errors = _agent_errors({"/models/base-7b/config.json": b"{}",
                            "/models/base-7b/tokenizer_config.json": b'{"eos_token": "x"}'},
                           argv, monkeypatch)
    assert errors == [NONE_LOCAL]
    finding = _fired(kb, argv, errors)[RULE]
    assert finding.severity == "medium"
    assert "/v1/chat/completions" in finding.message and "v4.44" in finding.message
    assert "/models/base-7b" in finding.message
    assert "--chat-template" in finding.remediation


def test_a_template_in_the_tokenizer_config_is_found_and_nothing_fires(kb, monkeypatch):
    argv = ["vllm", "serve", "/models/base-7b"]
    errors = _agent_errors({"/models/base-7b/config.json": b"{}",
                            "/models/base-7b/tokenizer_config.json":
                                b'{"chat_template": "{{ messages }}"}'}, argv, monkeypatch)
    assert errors == []
    assert RULE not in _fired(kb, argv, errors, {"source": "t", "sha256": "0" * 64,
                                                  "size_bytes": 14})


@pytest.mark.parametrize(("argv", "errors"), [
    # --chat-template given (even one the agent could not read): vLLM has a template
    (["vllm", "serve", "/models/base-7b", "--chat-template", "/t/chatml.jinja"],
     ["chat template: --chat-template /t/chatml.jinja not readable from the process's "
      "root/cwd"]),
    # the agent could not look (not in the cache): absence is not known
    (["vllm", "serve", "org/base-7b"],
     ["chat template: org/base-7b@main not in HF cache /root/.cache/huggingface/hub"]),
    # GGUF metadata may embed a template the agent does not read
    (["vllm", "serve", "/models/base-7b.gguf"],
     [f"chat template: {ondisk.NO_TEMPLATE_IN_FILES}local model directory "
      "/models/base-7b.gguf"]),
    # an older agent's line: it said so also when it could read none of the files
    (["vllm", "serve", "/models/base-7b"],
     ["chat template: no chat template in local model directory /models/base-7b"]),
    # mistral_common formats chats without a Jinja template
    (["vllm", "serve", "/models/base-7b", "--tokenizer-mode", "mistral"], [NONE_LOCAL]),
    # a pooling model serves no chat endpoint
    (["vllm", "serve", "/models/base-7b", "--runner", "pooling"], [NONE_LOCAL]),
    # an agent that sent no error (older agent, or nothing read): silent
    (["vllm", "serve", "/models/base-7b"], []),
])
def test_absence_is_claimed_only_when_the_agent_looked_and_vllm_has_no_template(
        kb, argv, errors):
    assert RULE not in _fired(kb, argv, errors)


def test_absence_says_where_the_agent_looked():
    values = parse_argv(["vllm", "serve", "org/base-7b"]).values
    absent, why = absence(None, [f"chat template: {ondisk.NO_TEMPLATE_IN_FILES}HF cache "
                                 "snapshot org/base-7b@" + "a" * 40], values)
    assert absent and why.startswith("no chat template in the tokenizer files read from HF "
                                     "cache snapshot org/base-7b@")
    assert absence({"sha256": "0" * 64}, [NONE_LOCAL], values) == (False, None)


def test_a_model_directory_the_agent_cannot_read_is_not_called_template_less(kb, monkeypatch):
    """Nothing of the model's files readable (another mount namespace, permissions): the agent
    says so instead of "no chat template", and no finding claims chat requests fail."""
    argv = ["vllm", "serve", "/models/base-7b"]
    errors = _agent_errors({}, argv, monkeypatch)
    assert errors == ["chat template: no tokenizer file readable in local model directory "
                      "/models/base-7b"]
    assert RULE not in _fired(kb, argv, errors)
