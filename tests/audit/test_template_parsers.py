"""Parsers judged from the chat template's markers, for any model: real templates of several
families (tests/data/chat_templates/, sources in its README), extracted by the agent's own
code, then evaluated with the shipped rules."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from audit.kb.context import build_context
from audit.kb.engine import load_rules
from fleet_agent.template_markers import extract

TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "chat_templates"
H100 = {"index": 0, "uuid": "GPU-0", "name": "NVIDIA H100 80GB HBM3",
        "memory_total_bytes": 85520809984, "compute_capability": "9.0"}


@pytest.fixture(scope="module")
def kb():
    return load_rules()


def template(name: str, markers: bool = True) -> dict:
    data = (TEMPLATES / name).read_bytes()
    out = {"source": f"/models/x/{name}", "sha256": hashlib.sha256(data).hexdigest(),
           "size_bytes": len(data)}
    return {**out, "markers": extract(data)} if markers else out


def evaluate(kb, model: str, name: str, *flags: str, markers: bool = True) -> dict:
    server = {"pid": 1, "base_url": "http://127.0.0.1:8000", "vllm_version": "0.32.0",
              "installed_vllm_version": "0.32.0", "argv": ["vllm", "serve", model, *flags],
              "chat_template": template(name, markers)}
    report = {"host": {"hostname": "h"}, "gpus": [H100], "servers": [server]}
    return {f.rule_id: f for f in kb.evaluate(build_context(server, report))}


# (model, template, tool parser that fits, one that does not)
TOOL_CASES = [
    ("Qwen/Qwen3-8B", "Qwen-Qwen3-0.6B.jinja", "hermes", "qwen3_coder"),
    ("Qwen/Qwen2.5-7B-Instruct", "Qwen-Qwen2.5-7B-Instruct.jinja", "hermes", "mistral"),
    ("Qwen/Qwen3-Coder-30B-A3B-Instruct", "Qwen3-Coder.jinja", "qwen3_coder", "hermes"),
    ("Qwen/Qwen3.5-35B-A3B", "Qwen3.5-4B.jinja", "qwen3_xml", "hermes"),
    ("openai/gpt-oss-120b", "openai-gpt-oss-120b.jinja", "openai", "hermes"),
    ("moonshotai/Kimi-K2-Instruct", "moonshotai-Kimi-K2.jinja", "kimi_k2", "deepseek_v3"),
    ("zai-org/GLM-4.6", "GLM-4.6.jinja", "glm45", "hermes"),
    ("MiniMaxAI/MiniMax-M2", "MiniMax-M2.jinja", "minimax_m2", "minimax"),
    ("deepseek-ai/DeepSeek-V3.1", "deepseek-ai-DeepSeek-V3.1.jinja", "deepseek_v31",
     "deepseek_v3"),
    ("mistralai/Mistral-Nemo-Instruct-2407", "mistralai-Mistral-Nemo-Instruct-2407.jinja",
     "mistral", "hermes"),
    ("ByteDance-Seed/Seed-OSS-36B-Instruct", "ByteDance-Seed-OSS.jinja", "seed_oss",
     "qwen3_coder"),
    ("meta-llama/Llama-3.2-3B-Instruct", "vllm-tool_chat_template_llama3.2_pythonic.jinja",
     "pythonic", "llama3_json"),
]


def test_each_real_template_yields_its_families_markers() -> None:
    got = {name: extract((TEMPLATES / name).read_bytes()) for _, name, _, _ in TOOL_CASES}
    assert "function_xml" in got["Qwen3-Coder.jinja"]
    assert "tool_call_json" not in got["Qwen3-Coder.jinja"]
    assert {"tool_call_json", "enable_thinking", "think_tag"} <= set(got["Qwen-Qwen3-0.6B.jinja"])
    assert "think_prefilled" not in got["Qwen-Qwen3-0.6B.jinja"]  # empty pair when off
    assert {"minimax_tool_call", "invoke_xml", "think_prefilled"} <= set(got["MiniMax-M2.jinja"])
    assert "harmony_channel" in got["openai-gpt-oss-120b.jinja"]
    assert got["moonshotai-Kimi-K2.jinja"] == ["kimi_tool_tokens"]
    assert "deepseek_tool_tokens" in got["deepseek-ai-DeepSeek-V3.1.jinja"]
    assert "arg_key_xml" in got["GLM-4.6.jinja"]
    assert got["mistralai-Mistral-Nemo-Instruct-2407.jinja"] == ["mistral_tool_calls"]


@pytest.mark.parametrize(("model", "name", "good", "bad"), TOOL_CASES)
def test_tool_parser_is_judged_by_the_templates_markup(kb, model, name, good, bad) -> None:
    assert "tpl-tool-parser-markup-mismatch" not in evaluate(
        kb, model, name, "--tool-call-parser", good)
    finding = evaluate(kb, model, name, "--tool-call-parser", bad)[
        "tpl-tool-parser-markup-mismatch"]
    assert good in finding.evidence["suggest"], finding.evidence
    assert finding.evidence["steer"]["flag"] == "--tool-call-parser"


def test_hermes_on_a_qwen_template_with_xml_calls_steers_to_the_xml_parser(kb) -> None:
    """The fresh-report miss: a Qwen model whose template emits <function=...> XML."""
    finding = evaluate(kb, "Qwen/Qwen3.5-35B-A3B", "Qwen3.5-4B.jinja",
                       "--tool-call-parser", "hermes")["tpl-tool-parser-markup-mismatch"]
    assert finding.evidence["steer"] == {"flag": "--tool-call-parser", "direction": "set",
                                         "value": "qwen3_coder"}
    assert "qwen3_xml" in finding.evidence["suggest"]


def test_a_model_name_that_hides_the_family_is_still_judged(kb) -> None:
    """The check needs no family: a local path with no family in its name."""
    found = evaluate(kb, "/srv/models/prod-assistant-v7", "Qwen3-Coder.jinja",
                     "--tool-call-parser", "hermes")
    assert found["tpl-tool-parser-markup-mismatch"].evidence["suggest"][:2] == [
        "qwen3_coder", "qwen3_xml"]


@pytest.mark.parametrize(("name", "parser", "fits"), [
    ("MiniMax-M2.jinja", "minimax_m2", True),
    ("MiniMax-M2.jinja", "minimax_m2_append_think", True),   # template opens <think>
    ("Qwen-Qwen3-0.6B.jinja", "minimax_m2_append_think", False),  # would double the tag
    ("Qwen-Qwen3-0.6B.jinja", "qwen3", True),
    ("moonshotai-Kimi-K2.jinja", "kimi_k2", False),  # K2-Instruct renders no reasoning
    ("Kimi-K2-Thinking.jinja", "kimi_k2", True),
    ("openai-gpt-oss-120b.jinja", "openai_gptoss", True),
    ("openai-gpt-oss-120b.jinja", "deepseek_r1", False),
    ("mistralai-Ministral-3-14B-Reasoning-2512.jinja", "mistral", True),
    ("mistralai-Mistral-Nemo-Instruct-2407.jinja", "mistral", False),
])
def test_reasoning_parser_is_judged_by_the_templates_tags(kb, name, parser, fits) -> None:
    found = evaluate(kb, "/srv/models/m", name, "--reasoning-parser", parser)
    assert ("tpl-reasoning-parser-markup-mismatch" not in found) is fits


def test_without_markers_the_family_table_still_judges(kb) -> None:
    """An older agent sends no markers: the name-based rules keep their say, and the
    template rules stay silent."""
    old = evaluate(kb, "Qwen/Qwen3-Coder-30B-A3B-Instruct", "Qwen3-Coder.jinja",
                   "--tool-call-parser", "hermes", markers=False)
    assert "tpl-tool-parser-markup-mismatch" not in old
    assert "up-tool-parser-model-mismatch" in old
    new = evaluate(kb, "Qwen/Qwen3-Coder-30B-A3B-Instruct", "Qwen3-Coder.jinja",
                   "--tool-call-parser", "hermes")
    assert "up-tool-parser-model-mismatch" not in new  # one finding, not two


# ----------------------------------------------------------- tool markup, no tool parsing

NO_PARSING = "tpl-tool-template-without-tool-parsing"


@pytest.mark.parametrize(("model", "name", "good", "bad"),
                         [c for c in TOOL_CASES if c[2] != "openai"])
def test_a_tool_template_without_tool_flags_names_the_flags_and_its_parser(
        kb, model, name, good, bad) -> None:
    finding = evaluate(kb, model, name)[NO_PARSING]
    assert finding.severity == "low"  # an advisory: nothing shows that clients send tools
    assert "--enable-auto-tool-choice" in finding.message
    assert "--tool-call-parser" in finding.message and good in finding.message
    assert good in finding.evidence["suggest"]
    assert "HTTP 400" in finding.message and "30613" in finding.message


@pytest.mark.parametrize("flags", [
    ("--enable-auto-tool-choice", "--tool-call-parser", "hermes"),
    ("--tool-call-parser", "hermes"),
])
def test_a_server_with_tool_parsing_is_not_told_to_add_it(kb, flags) -> None:
    assert NO_PARSING not in evaluate(kb, "Qwen/Qwen3-8B", "Qwen-Qwen3-0.6B.jinja", *flags)


def test_a_template_without_tool_markup_or_unread_markers_says_nothing(kb) -> None:
    server = {"pid": 1, "base_url": "http://127.0.0.1:8000", "vllm_version": "0.32.0",
              "installed_vllm_version": "0.32.0", "argv": ["vllm", "serve", "org/base-7b"],
              "chat_template": {"source": "/models/x/t.jinja", "sha256": "0" * 64,
                                "size_bytes": 120, "markers": []}}
    report = {"host": {"hostname": "h"}, "gpus": [H100], "servers": [server]}
    assert NO_PARSING not in {f.rule_id for f in kb.evaluate(build_context(server, report))}
    assert NO_PARSING not in evaluate(kb, "Qwen/Qwen3-8B", "Qwen-Qwen3-0.6B.jinja",
                                      markers=False)


def test_gpt_oss_keeps_its_own_advisory_only(kb) -> None:
    fired = evaluate(kb, "openai/gpt-oss-120b", "openai-gpt-oss-120b.jinja")
    assert "upx-gptoss-no-tool-call-parser" in fired and NO_PARSING not in fired
