"""Release facts a running or refused command meets: pipeline parallelism before it shipped
(0.5.1), --preemption-mode sending a V1-default release back to the V0 engine, and the
deepseek_r1 reasoning parser before 0.7.3 with a template that pre-fills <think>. Every
report is built here."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "recommend"))
from hostfinding import KB, finding  # noqa: E402
from rkit import serve  # noqa: E402

PP = "known-pipeline-parallel-before-0-5-1"
V0 = "known-preemption-mode-forces-v0-engine"
R1 = "known-deepseek-r1-parser-needs-start-tag-before-0-7-3"


def _finding(argv: list[str], version: str | None, rule_id: str, env: dict | None = None):
    return finding(rule_id, "NVIDIA A100-SXM4-80GB", argv, version, count=2, env=env)


# ----------------------------------------------------------------------------- pipeline

def test_pipeline_parallelism_before_0_5_1_is_a_refused_start() -> None:
    found = _finding(serve("meta-llama/Llama-2-70b-hf", "--pipeline-parallel-size", "2"),
                     "0.5.0.post1", PP)
    assert found is not None and found.severity == "high"
    assert "0.5.1" in found.message and "does not start" in found.message
    assert "--tensor-parallel-size" in found.remediation


@pytest.mark.parametrize(("version", "flags"), [
    ("0.5.1", ("--pipeline-parallel-size", "2")), ("0.5.0", ("--pipeline-parallel-size", "1")),
    ("0.5.0", ("--tensor-parallel-size", "2")), (None, ("--pipeline-parallel-size", "2"))])
def test_pipeline_rule_is_quiet_where_pp_exists_or_is_off(version, flags) -> None:
    assert _finding(serve("meta-llama/Llama-2-70b-hf", *flags), version, PP) is None


def test_the_refusal_line_matches_whatever_the_version() -> None:
    line = "NotImplementedError: Pipeline parallelism is not supported yet."
    assert PP in {rule.id for rule, _ in KB.match_log([line])}
    assert PP not in {rule.id for rule, _ in KB.match_log(
        ["NotImplementedError: Pipeline parallelism is not supported for this model."])}


# ----------------------------------------------------------------------------- V0 fallback

@pytest.mark.parametrize("version", ["0.8.5", "0.9.2", "0.10.0"])
def test_preemption_mode_on_a_v1_default_release_names_the_v0_fallback(version) -> None:
    found = _finding(serve("m/x", "--preemption-mode", "swap"), version, V0)
    assert found is not None and found.severity == "medium"
    assert "falls back to V0" in found.message and f"vLLM {version}" in found.message
    assert "Drop --preemption-mode" in found.remediation


def test_with_the_version_unknown_the_range_is_said() -> None:
    found = _finding(serve("m/x", "--preemption-mode", "recompute"), None, V0)
    assert found is not None and "not reported" in found.message
    assert "0.8.0-0.10.x" in found.message


@pytest.mark.parametrize(("version", "env", "flags"), [
    ("0.7.3", None, ("--preemption-mode", "swap")),       # V0 is the only engine
    ("0.9.2", {"VLLM_USE_V1": "0"}, ("--preemption-mode", "swap")),  # V0 chosen on purpose
    ("0.9.2", None, ("--max-num-seqs", "64")),
])
def test_preemption_rule_is_quiet_without_a_fallback(version, env, flags) -> None:
    assert _finding(serve("m/x", *flags), version, V0, env) is None


# ----------------------------------------------------------------------------- deepseek_r1

R1_ARGV = serve("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", "--enable-reasoning",
                "--reasoning-parser", "deepseek_r1")


def test_deepseek_r1_parser_before_0_7_3_with_an_r1_model_misses_the_reasoning() -> None:
    found = _finding(R1_ARGV, "0.7.2", R1)
    assert found is not None and found.severity == "medium"
    assert "reasoning_content stays null" in found.message
    assert "0.7.3" in found.remediation and "--chat-template" in found.remediation


@pytest.mark.parametrize(("version", "argv"), [
    ("0.7.3", R1_ARGV),
    ("0.7.2", serve("Qwen/QwQ-32B", "--enable-reasoning", "--reasoning-parser", "deepseek_r1")),
    ("0.7.2", serve("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B")),
])
def test_deepseek_r1_parser_rule_is_quiet_elsewhere(version, argv) -> None:
    assert _finding(argv, version, R1) is None
