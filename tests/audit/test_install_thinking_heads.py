"""Failed starts from an unbuilt or mismatched vLLM install, Qwen3 hybrid thinking without a
reasoning parser (finding and recommended command agree), the head-divisibility guess when no
model is named, and version text that is no image tag. Reports are built here."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from advice.recommend import recommend_report
from advice.recommend.plan import Plan
from advice.recommend.repairs import REPAIRS
from audit.kb.context import build_context
from audit.kb.engine import load_rules
from audit.kb.failed_start_explain import explain
from audit.kb.versions import parse_version

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "recommend"))
from casekit import extract_version, model_files_of  # noqa: E402
from rkit import host_report, serve  # noqa: E402

KB = load_rules()
THINK = "up-qwen3-hybrid-thinking-without-reasoning-parser"
HEADS = "up-tp-not-dividing-attention-heads"


# ----------------------------------------------------------------------------- installation

@pytest.mark.parametrize("line", [
    "ModuleNotFoundError: No module named 'vllm._C'",
    'ModuleNotFoundError: No module named "vllm._C"',
    "ImportError: No module named 'vllm._moe_C'",
    "NameError: name 'ops' is not defined (Caught error: No module named 'vllm._C')",
])
def test_a_missing_compiled_extension_is_an_installation_problem(line: str) -> None:
    out = explain(["Traceback (most recent call last):", line],
                  ["vllm", "serve", "m", "--tensor-parallel-size", "2"], None)
    assert out.kind == "installation"
    assert out.setting is None and not out.names_setting_and_change
    assert "installation problem" in out.summary
    assert "install a built vLLM wheel" in out.change and "build the checkout" in out.change


def test_an_undefined_torch_symbol_in_the_extension_is_a_wheel_for_another_torch() -> None:
    line = ("ImportError: /usr/lib/python3/site-packages/vllm/_C.abi3.so: undefined symbol: "
            "_ZN3c1015SmallVectorBaseIjE8grow_podEPKvmm")
    out = explain([line], ["vllm", "serve", "m"], "0.6.3")
    assert out.kind == "installation" and out.setting is None
    assert "another PyTorch" in out.summary and "installed PyTorch" in out.change


def test_a_missing_cuda_driver_symbol_stays_a_driver_problem() -> None:
    line = ("ImportError: /opt/venv/lib/python3.12/site-packages/vllm/_C.abi3.so: undefined "
            "symbol: cuTensorMapEncodeTiled")
    assert explain([line], ["vllm", "serve", "m"], None).kind == "driver"


# ----------------------------------------------------------------------------- hybrid thinking

def _qwen3(version: str, *flags: str) -> dict:
    report = host_report("NVIDIA H100 80GB HBM3", 1, serve("Qwen/Qwen3-8B", *flags),
                         version=version, template=None)
    report["servers"][0]["model_files"] = model_files_of({"model_config": "qwen3-8b"})
    return report


def _finding(report: dict, rule_id: str):
    return next((f for f in KB.evaluate(build_context(report["servers"][0], report))
                 if f.rule_id == rule_id), None)


def test_qwen3_without_a_reasoning_parser_gets_the_parser_of_its_release() -> None:
    new = _finding(_qwen3("0.25.1"), THINK)
    assert new is not None and new.severity == "medium"
    assert new.evidence["parser"] == "qwen3" and new.evidence["enable_reasoning"] is False
    assert "config.json model_type qwen3" in new.message
    assert "--reasoning-parser qwen3" in new.message
    old = _finding(_qwen3("0.8.5"), THINK)
    assert old.evidence["parser"] == "deepseek_r1" and old.evidence["enable_reasoning"] is True
    assert "--enable-reasoning" in old.message and "no qwen3 parser" in old.message


@pytest.mark.parametrize("flags", [
    ("--reasoning-parser", "qwen3"),
    ("--default-chat-template-kwargs", '{"enable_thinking": false}'),
])
def test_qwen3_with_a_parser_or_thinking_off_server_side_is_quiet(flags: tuple) -> None:
    assert _finding(_qwen3("0.25.1", *flags), THINK) is None


def test_a_qwen2_model_is_not_judged_as_hybrid_thinking() -> None:
    report = host_report("NVIDIA H100 80GB HBM3", 1, serve("Qwen/Qwen2.5-7B-Instruct"),
                         template=None)
    report["servers"][0]["model_files"] = model_files_of({"model_config": "qwen2.5-7b"})
    assert _finding(report, THINK) is None


def test_the_recommended_command_adds_the_parser_the_finding_names() -> None:
    report = _qwen3("0.25.1")
    item = recommend_report(report, kb=KB)["servers"][0]
    assert item["status"] == "ok", item["notes"]
    argv = item["replicas"][0]["argv"]
    assert argv[argv.index("--reasoning-parser") + 1] == "qwen3"
    row = next(r for r in item["diff"] if r["flag"] == "--reasoning-parser")
    assert THINK in row["reason"]


def test_on_0_8_the_repair_writes_deepseek_r1_with_enable_reasoning() -> None:
    finding = _finding(_qwen3("0.8.5"), THINK)
    plan = Plan(model="Qwen/Qwen3-8B", version="0.8.5")
    assert REPAIRS[THINK](plan, {}, finding, {}) is True
    assert plan.values["reasoning_parser"] == "deepseek_r1"
    assert plan.values["enable_reasoning"] is True


# ----------------------------------------------------------------------------- head guess

def _tp_report(argv: list[str]) -> dict:
    return host_report("NVIDIA H100 80GB HBM3", 8, argv, template=None)


def test_no_head_guess_without_a_model() -> None:
    # no model named: vLLM's or the script's default model runs, whose heads are unknown here
    report = _tp_report(["python3", "benchmarks/benchmark_throughput.py",
                         "--tensor-parallel-size=6"])
    assert _finding(report, HEADS) is None


def test_the_head_guess_stays_for_a_named_model_without_geometry() -> None:
    report = _tp_report(serve("example-org/unlisted-model-27b", "--tensor-parallel-size", "3"))
    found = _finding(report, HEADS)
    assert found is not None and found.severity == "high"


# ----------------------------------------------------------------------------- version text

@pytest.mark.parametrize("raw", ["not", "not stated", "unknown", "n/a"])
def test_words_that_state_no_version_are_no_image_tag(raw: str) -> None:
    info = parse_version(raw)
    assert info.version is None and info.is_prerelease is False
    assert "pre-release image" not in info.note


def test_a_case_saying_not_stated_has_no_version() -> None:
    assert extract_version("not stated (main branch, report dated 2023-11-28)") is None
    assert extract_version("0.8.5") == "0.8.5"
