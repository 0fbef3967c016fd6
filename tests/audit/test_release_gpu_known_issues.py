"""Release x GPU x model facts read from vLLM's own wheels: VLLM_USE_V1=1 on a GPU below
compute capability 8.0 (0.8.0-0.10.1 refuse it), Gemma 2's soft-capping on Volta/Turing
(XFormers refuses it in 0.5.4-0.6.4), rope_type "llama3" before 0.5.3.post1, the gptq_bitblas
override of 0.8.5 on compute capability 7.x, and --tool-call-parser without
--enable-auto-tool-choice (0.14.0 on: the parser is never loaded). Every report is built here;
near misses stay quiet."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from hostfinding import KB, finding

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "recommend"))
from rkit import serve  # noqa: E402

V1 = "known-v1-engine-forced-pre-ampere-before-0-10-2"
V1_07 = "upx-v1-engine-forced-pre-ampere-0-7"
SOFTCAP = "known-gemma2-softcap-xformers-pre-ampere"
ROPE = "upx-llama31-rope-needs-vllm-0-5-3"
BITBLAS = "known-gptq-bitblas-override-pre-ampere-0-8-5"
TOOLS = "known-tool-parser-unused-without-auto-tool-choice"
LLAMA31_ROPE = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192, "rope_type": "llama3"}


def _finding(gpu: str, argv: list[str], version: str | None, rule_id: str, *,
             env: dict | None = None, config: dict[str, Any] | None = None):
    return finding(rule_id, gpu, argv, version, env=env, config=config)


def _log_rules(line: str) -> set[str]:
    return {rule.id for rule, _ in KB.match_log([line])}


# ------------------------------------------------------------------------ V1 below 8.0

@pytest.mark.parametrize("version", ["0.8.0", "0.8.5", "0.9.2", "0.10.1.1"])
def test_v1_forced_on_a_turing_gpu_is_a_refused_start_before_0_10_2(version) -> None:
    found = _finding("Tesla T4", serve("facebook/opt-125m"), version, V1,
                     env={"VLLM_USE_V1": "1"})
    assert found is not None and found.severity == "high"
    assert "Compute Capability < 8.0" in found.message and "0.10.2" in found.remediation


def test_v1_forced_with_no_version_is_said_at_medium() -> None:
    found = _finding("Tesla V100-SXM2-16GB", serve("facebook/opt-125m"), None, V1,
                     env={"VLLM_USE_V1": "1"})
    assert found is not None and found.severity == "medium"


@pytest.mark.parametrize(("gpu", "version", "env"), [
    ("Tesla T4", "0.10.2", {"VLLM_USE_V1": "1"}),            # V1 runs below 8.0 there
    ("Tesla T4", "0.9.2", {}),                                # falls back to V0 by itself
    ("Tesla T4", "0.9.2", {"VLLM_USE_V1": "0"}),
    ("NVIDIA A100-SXM4-80GB", "0.9.2", {"VLLM_USE_V1": "1"}),
    ("Tesla T4", "0.7.3", {"VLLM_USE_V1": "1"}),              # the 0.7 rule's range
])
def test_v1_rule_is_quiet_where_v1_runs_or_is_not_forced(gpu, version, env) -> None:
    assert _finding(gpu, serve("facebook/opt-125m"), version, V1, env=env) is None


def test_the_0_7_rule_and_the_new_one_do_not_overlap() -> None:
    argv, env = serve("facebook/opt-125m"), {"VLLM_USE_V1": "1"}
    assert _finding("Tesla T4", argv, "0.7.3", V1_07, env=env) is not None
    assert _finding("Tesla T4", argv, "0.8.5", V1_07, env=env) is None


def test_the_v1_refusal_line_names_the_cause() -> None:
    assert V1 in _log_rules("NotImplementedError: VLLM_USE_V1=1 is not supported with "
                            "Compute Capability < 8.0.")
    assert V1 not in _log_rules("NotImplementedError: VLLM_USE_V1=1 is not supported with "
                                "VLLM_ATTENTION_BACKEND=TRITON_ATTN_VLLM_V1.")


# -------------------------------------------------------------- Gemma 2 soft-capping

@pytest.mark.parametrize(("gpu", "version"), [
    ("Quadro RTX 4000", "0.6.3"), ("Tesla T4", "0.5.4"), ("Tesla V100-SXM2-16GB", "0.6.4")])
def test_gemma2_on_volta_or_turing_is_refused_by_xformers(gpu, version) -> None:
    found = _finding(gpu, serve("google/gemma-2-9b-it"), version, SOFTCAP)
    assert found is not None and found.severity == "critical"
    assert "XFormers" in found.message and "8.0" in found.message
    assert "0.6.5" in found.remediation


@pytest.mark.parametrize(("gpu", "model", "version"), [
    ("Quadro RTX 4000", "google/gemma-2-9b-it", "0.6.5"),     # warns, runs
    ("NVIDIA A10G", "google/gemma-2-9b-it", "0.6.3"),          # FlashAttention
    ("Quadro RTX 4000", "google/gemma-7b-it", "0.6.3"),        # no soft-capping
    ("Quadro RTX 4000", "google/gemma-2-9b-it", "0.5.3"),      # the FlashInfer rule's range
])
def test_softcap_rule_is_quiet_elsewhere(gpu, model, version) -> None:
    assert _finding(gpu, serve(model), version, SOFTCAP) is None


def test_the_xformers_softcap_line_names_the_cause() -> None:
    assert SOFTCAP in _log_rules(
        "ValueError: XFormers does not support attention logits soft capping.")
    assert SOFTCAP not in _log_rules("XFormers does not support logits soft cap. Outputs may "
                                     "be slightly off.")


# ------------------------------------------------------------------- rope_type llama3

def test_llama31_config_on_0_5_3_is_a_refused_start() -> None:
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"],
              "max_position_embeddings": 131072, "rope_scaling": LLAMA31_ROPE}
    found = _finding("NVIDIA A100-SXM4-80GB", serve("/models/my-finetune"), "0.5.3", ROPE,
                     config=config)
    assert found is not None and found.severity == "critical"
    assert "0.5.3.post1" in found.remediation


def test_llama31_by_name_on_0_5_2_is_flagged_and_post1_is_quiet() -> None:
    argv = serve("meta-llama/Meta-Llama-3.1-8B-Instruct")
    assert _finding("NVIDIA A100-SXM4-80GB", argv, "0.5.2", ROPE) is not None
    assert _finding("NVIDIA A100-SXM4-80GB", argv, "0.5.3.post1", ROPE) is None


def test_a_config_without_llama3_rope_is_quiet_whatever_the_name() -> None:
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"],
              "max_position_embeddings": 8192, "rope_scaling": None}
    assert _finding("NVIDIA A100-SXM4-80GB", serve("org/llama-3.1-style-8k"), "0.5.3", ROPE,
                    config=config) is None
    assert _finding("NVIDIA A100-SXM4-80GB", serve("meta-llama/Meta-Llama-3-8B-Instruct"),
                    "0.5.3", ROPE) is None


# ---------------------------------------------------------------------- gptq_bitblas

@pytest.mark.parametrize("gpu", ["Tesla T4", "Tesla V100-SXM2-16GB"])
def test_gptq_on_0_8_5_below_ampere_is_flagged(gpu) -> None:
    found = _finding(gpu, serve("Qwen/Qwen2.5-14B-Instruct-GPTQ-Int4"), "0.8.5.post1",
                     BITBLAS)
    assert found is not None and found.severity == "high"
    assert "--quantization gptq" in found.remediation


@pytest.mark.parametrize(("gpu", "flags", "version"), [
    ("Tesla T4", ("--quantization", "gptq"), "0.8.5"),   # the plain GPTQ path, forced
    ("Tesla T4", (), "0.9.0"), ("Tesla T4", (), "0.8.4"),
    ("NVIDIA A10G", (), "0.8.5"),                        # gptq_marlin wins on 8.6
])
def test_bitblas_rule_is_quiet_elsewhere(gpu, flags, version) -> None:
    argv = serve("Qwen/Qwen2.5-14B-Instruct-GPTQ-Int4", *flags)
    assert _finding(gpu, argv, version, BITBLAS) is None


# ------------------------------------------------------------- tool parser gating

def test_tool_parser_without_auto_tool_choice_is_unused_from_0_14() -> None:
    argv = serve("HuggingFaceTB/SmolLM2-135M-Instruct", "--tool-call-parser", "hermes")
    found = _finding("NVIDIA L4", argv, "0.28.0", TOOLS)
    assert found is not None and found.severity == "medium"
    assert "--enable-auto-tool-choice" in found.remediation


@pytest.mark.parametrize(("model", "flags", "version"), [
    ("Qwen/Qwen3-8B", ("--tool-call-parser", "hermes", "--enable-auto-tool-choice"), "0.28.0"),
    ("Qwen/Qwen3-8B", ("--tool-call-parser", "hermes"), "0.13.0"),
    ("mistralai/Mistral-7B-Instruct-v0.3", ("--tool-call-parser", "mistral",
                                            "--tokenizer-mode", "mistral"), "0.28.0"),
    ("openai/gpt-oss-20b", ("--tool-call-parser", "openai"), "0.28.0"),
    ("Qwen/Qwen3-8B", (), "0.28.0"),
])
def test_tool_parser_rule_is_quiet_where_the_parser_loads_or_is_not_needed(
        model, flags, version) -> None:
    assert _finding("NVIDIA L4", serve(model, *flags), version, TOOLS) is None
