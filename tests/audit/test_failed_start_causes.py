"""Failed-start causes that need the report's facts (audit/kb/failed_start_causes.py), the
release labels of explanations judged with a stand-in table, ROCm-only checks on other hosts,
and the rules added with them; every report is built here, none is read from a case file."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from audit.kb import quant_capability as qc
from audit.kb.failed_start_explain import explain
from audit.kb.failed_start_facts import facts_of

sys.path.insert(0, str(Path(__file__).resolve().parent))
import casekit  # noqa: E402

_GIB = 2**30


def _report(gpu: str | None, memory_gib: float | None, argv: list[str], lines: list[str],
            *, driver: str | None = None, cuda: str | None = None,
            model_files: dict | None = None) -> tuple[dict, dict]:
    gpus = casekit._gpus([{"name": gpu, "memory_gib": memory_gib, "count": 1}] if gpu else [],
                         "t")
    report = casekit.report_skeleton("causes", gpus)
    report["host"]["nvidia_driver_version"] = driver
    report["host"]["cuda_driver_version"] = cuda
    if model_files is not None:
        report["servers"].append(casekit.server_entry(argv, "0.11.0"))
        report["servers"][-1]["model_files"] = model_files
    failed = casekit.failed_start_of("1", argv, None, lines)
    report["failed_starts"] = [failed]
    return report, failed


def _explain(report, failed, version):
    return explain(failed["lines"], failed["argv"], version, facts=facts_of(report, failed))


# ----------------------------------------------------------------------------- driver

def test_a_driver_older_than_the_wheels_cuda_is_the_cause():
    report, failed = _report("NVIDIA A100-SXM4-80GB", 80, ["vllm", "serve", "m/x"], [
        "torch 2.4.0+cu121",
        "UserWarning: CUDA initialization: The NVIDIA driver on your system is too old "
        "(found version 11040)."], driver="470.82.01", cuda="11.4")
    out = _explain(report, failed, "0.6.3")
    assert out.kind == "driver" and out.setting is None
    assert "CUDA 11.4" in out.summary and "CUDA 12.1" in out.summary
    assert "525.60.13" in out.change and "11.4 or older" in out.change


def test_the_host_cuda_version_is_used_when_the_log_gives_none():
    report, failed = _report("NVIDIA L4", 24, ["vllm", "serve", "m/x"], [
        "RuntimeError: CUDA driver version is insufficient for CUDA runtime version"],
        driver="535.54.03", cuda="12.2")
    out = _explain(report, failed, "0.11.0")
    assert out.kind == "driver" and "CUDA 12.2" in out.summary and "535.54.03" in out.summary


_ERROR_804 = ("RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda "
              "functions before calling NumCudaDevices() that might have already set an "
              "error? Error 804: forward compatibility was attempted on non supported HW")


def test_error_804_is_a_driver_older_than_the_images_cuda_on_a_consumer_gpu():
    report, failed = _report("NVIDIA GeForce RTX 4090", 24, ["vllm", "serve", "m/x"],
                             ["torch 2.3.0+cu121", _ERROR_804], driver="525.147.05",
                             cuda="12.0")
    out = _explain(report, failed, "0.4.3")
    assert out.kind == "driver" and out.setting is None and out.fix_argv is None
    assert "error 804" in out.summary and "CUDA 12.1" in out.summary
    assert "525.147.05" in out.summary and "RTX 4090" in out.summary
    assert "forward compatibility" in out.summary and "not a vLLM setting" in out.summary
    assert out.change.startswith("upgrade the host NVIDIA driver") and "12.1" in out.change
    assert "cuda-compatibility/forward-compatibility" in out.checked


def test_error_804_names_the_image_when_its_cuda_is_unknown():
    report, failed = _report(None, None, ["vllm", "serve", "m/x"], [_ERROR_804])
    failed["image"] = "vllm/vllm-openai:latest"
    out = _explain(report, failed, None)
    assert out.kind == "driver" and "vllm/vllm-openai:latest" in out.summary
    assert "upgrade the host NVIDIA driver" in out.change


def test_an_error_804_quoted_inside_other_words_still_reads_as_forward_compatibility():
    report, failed = _report("NVIDIA L4", 24, ["vllm", "serve", "m/x"], [
        "CUDA error: cudaErrorCompatNotSupportedOnDevice"], driver="470.82.01", cuda="11.4")
    out = _explain(report, failed, "0.11.0")
    assert out.kind == "driver" and "forward compatibility" in out.summary


# ----------------------------------------------------------------------------- quantization

_AWQ_LINE = ("ValueError: The quantization method awq is not supported for the current GPU. "
             "Minimum capability: 80. Current capability: 75.")


def test_the_awq_minimum_by_release_comes_from_the_wheels():
    rows = dict(qc.history("awq"))
    assert rows["0.2.0"] == 80 and rows["0.2.1"] == 75 and rows["0.8.5"] == 75
    assert qc.first_accepting(qc.history("awq"), 75, "0.2.0") == "0.2.1"
    assert qc.first_accepting(qc.history("awq"), 75, "0.11.0") is None  # already accepts
    assert qc.first_accepting(qc.history("awq_marlin"), 75, "0.11.0") == "0.15.1"


def test_a_checkpoint_method_below_its_minimum_names_the_release_not_a_drop():
    argv = ["vllm", "serve", "org/llama-7b-awq", "--quantization", "awq"]
    report, failed = _report("Tesla T4", 15, argv, [_AWQ_LINE])
    out = _explain(report, failed, "0.2.0")
    assert out.changed_in == "0.2.1" and "0.2.1" in out.change
    assert "does not help" in out.change and "drop --quantization awq and let" not in out.change
    assert out.fix_argv is None


def test_an_online_method_may_still_be_dropped():
    line = ("ValueError: The quantization method bitsandbytes is not supported for the current "
            "GPU. Minimum capability: 70. Current capability: 52.")
    argv = ["vllm", "serve", "org/m-7b", "--quantization", "bitsandbytes"]
    report, failed = _report("Tesla M40", 24, argv, [line])
    out = _explain(report, failed, "0.11.0")
    assert "drop --quantization bitsandbytes" in out.change and "7.0" in out.summary
    assert out.changed_in is None


def test_a_compressed_tensors_scheme_from_the_checkpoint_names_its_release():
    config = {"quantization_config": {"quant_method": "compressed-tensors", "config_groups": {
        "group_0": {"weights": {"num_bits": 4, "type": "float"},
                    "input_activations": None}}}}
    argv = ["vllm", "serve", "org/qwen3-32b-nvfp4a16"]
    report, failed = _report("NVIDIA GeForce RTX 2080 Ti", 11, argv, [
        "RuntimeError: Quantization scheme is not supported for the current GPU."],
        model_files={"config": config, "weights_bytes": 20 * _GIB})
    out = _explain(report, failed, "0.14.0")
    assert "W4A16Fp4" in out.summary and "7.5" in out.summary
    assert out.changed_in == "0.16.0" and "0.16.0" in out.change


# ----------------------------------------------------------------------------- memory

_NO_BLOCKS = ("ValueError: No available memory for the cache blocks. Try increasing "
              "`gpu_memory_utilization` when initializing the engine.")


def test_weights_above_the_budget_give_the_value_to_raise_it_to():
    argv = ["vllm", "serve", "org/m-7b-awq", "--gpu-memory-utilization", "0.1"]
    report, failed = _report("Tesla T4", 15, argv, [_NO_BLOCKS],
                             model_files={"config": {}, "weights_bytes": 4 * _GIB})
    out = _explain(report, failed, "0.6.0")
    assert out.setting == "--gpu-memory-utilization" and out.operator_set is True
    assert "leave no room" in out.summary and "0.1 x 15.0 GiB" in out.summary
    assert "raise --gpu-memory-utilization to at least 0.40" in out.change


def test_weights_that_fit_no_gpu_ask_for_tensor_parallelism():
    argv = ["vllm", "serve", "org/m-70b", "--gpu-memory-utilization", "0.9"]
    report, failed = _report("NVIDIA L40S", 48, argv, [_NO_BLOCKS],
                             model_files={"config": {}, "weights_bytes": 140 * _GIB})
    out = _explain(report, failed, "0.11.0")
    assert "--tensor-parallel-size 4" in out.change


def test_without_weights_the_direction_is_still_given():
    report, failed = _report("Tesla T4", 15, ["vllm", "serve", "<model>"], [_NO_BLOCKS])
    out = _explain(report, failed, "0.11.0")
    assert out.change.startswith("raise --gpu-memory-utilization")


# ----------------------------------------------------------------------------- labels, platform

_BLOCK = "ValueError: Block size must be a multiple of 16."


def test_an_unknown_version_is_never_stated_as_a_tables_release():
    out = explain([_BLOCK], ["vllm", "serve", "m/x", "--block-size", "<n>"], None)
    assert "of unknown version" in out.summary and "None" not in out.summary
    assert "(now None)" not in (out.change or "")


def test_a_rocm_only_check_is_not_cited_for_another_host():
    for platform in (None, "cuda"):
        out = explain([_BLOCK], ["vllm", "serve", "m/x", "--block-size", "8"], None,
                      platform=platform)
        assert "rocm" not in (out.checked or "").lower(), platform


def test_a_release_without_its_own_table_is_said_to_be_judged_with_the_nearest():
    out = explain([_AWQ_LINE], ["vllm", "serve", "m/x"], "0.14.0", cc=7.5)
    assert "0.14.0 (judged with the nearest shipped table, 0.11.0)" in out.summary


# ----------------------------------------------------------------------------- rules

@pytest.fixture(scope="module")
def kb():
    from audit.kb.engine import load_rules
    return load_rules()


def _fired(kb, version, argv, gpu="NVIDIA H100 80GB HBM3", metrics=None):
    from audit.kb.context import build_contexts
    gpus = casekit._gpus([{"name": gpu, "memory_gib": 80, "count": 1}], "r")
    report = casekit.report_skeleton("rules", gpus)
    report["servers"].append(casekit.server_entry(
        argv, version, gpu_uuids=[g["uuid"] for g in gpus], metrics=metrics))
    found = {}
    for ctx in build_contexts(report, []):
        found.update({f.rule_id: f for f in kb.evaluate(ctx)})
    return found


def test_the_headroom_finding_is_a_risk_on_a_server_seen_serving(kb):
    argv = ["vllm", "serve", "Qwen/Qwen3-8B", "--gpu-memory-utilization", "0.95"]
    assert _fired(kb, "0.11.0", argv)["up-gpu-mem-util-no-cudagraph-headroom"].severity == \
        "high"
    serving = casekit.metrics_text({"running": 3}, "0.11.0", "Qwen/Qwen3-8B")
    found = _fired(kb, "0.11.0", argv, metrics=serving)
    assert found["up-gpu-mem-util-no-cudagraph-headroom"].severity == "medium"


def test_gpt_oss_non_streamed_tool_calls_before_the_fix(kb):
    argv = ["vllm", "serve", "openai/gpt-oss-20b", "--enable-auto-tool-choice",
            "--tool-call-parser", "openai"]
    rule = "known-gptoss-nonstreaming-tool-call-in-content"
    assert rule in _fired(kb, "0.10.2", argv)
    assert rule not in _fired(kb, "0.11.0", argv)


def test_eagle_on_an_mrope_model_in_0_15(kb):
    spec = '{"method": "eagle3", "model": "org/qwen3-vl-eagle3", "num_speculative_tokens": 3}'
    argv = ["vllm", "serve", "Qwen/Qwen3-VL-4B-Instruct", "--speculative-config", spec]
    rule = "known-eagle-mrope-drafter-positions-0-15"
    assert rule in _fired(kb, "0.15.1", argv)
    assert rule not in _fired(kb, "0.16.0", argv)
    assert rule not in _fired(kb, "0.13.1", argv)
    one = spec.replace('"num_speculative_tokens": 3', '"num_speculative_tokens": 1')
    assert rule not in _fired(kb, "0.15.1", argv[:-1] + [one])


def test_a_cpu_only_check_on_an_unknown_platform_gives_no_release_advice():
    line = ("ValueError: Head size 40 is not supported by MLACommon. Supported head sizes are: "
            "[576].")
    out = explain([line], ["vllm", "serve", "m/x"], None)
    if out.site and "cpu_" in out.site["at"]:
        assert out.changed_in is None and "cpu-only" in (out.release_note or "")
