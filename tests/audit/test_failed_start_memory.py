"""A start that left no memory for the KV cache (audit/kb/failed_start_memory.py): vLLM's
own accounting in the log (V1 "Available KV cache memory: -X GiB", V0's profiling summary)
names the cause even when no exception line was captured, and the change follows from
which part does not fit. Every report is built here; none is read from a case file."""

from __future__ import annotations

import sys
from pathlib import Path

from audit.kb.failed_start_explain import explain
from audit.kb.failed_start_facts import facts_of

sys.path.insert(0, str(Path(__file__).resolve().parent))
import casekit  # noqa: E402

_GIB = 2**30
_NO_BLOCKS = ("ValueError: No available memory for the cache blocks. Try increasing "
              "`gpu_memory_utilization` when initializing the engine.")
_ENGINE_DOWN = "ERROR 08-20 18:04:22 [core.py:700] EngineCore failed to start."


def _explain(argv: list[str], lines: list[str], *, memory_gib: float = 80, count: int = 1,
             version: str | None = "0.10.1", weights_gib: float | None = None):
    gpus = casekit._gpus([{"name": "NVIDIA H100 80GB HBM3", "memory_gib": memory_gib,
                           "count": count}], "m")
    report = casekit.report_skeleton("memory", gpus)
    if weights_gib is not None:
        report["servers"].append(casekit.server_entry(argv, version or "0.10.1"))
        report["servers"][-1]["model_files"] = {"config": {},
                                                "weights_bytes": int(weights_gib * _GIB)}
    failed = casekit.failed_start_of("1", argv, None, lines)
    report["failed_starts"] = [failed]
    return explain(failed["lines"], failed["argv"], version, facts=facts_of(report, failed))


def test_negative_kv_memory_without_an_exception_is_the_cause():
    out = _explain(["vllm", "serve", "org/moe-120b"], [
        "INFO 08-20 18:04:22 [gpu_worker.py:276] Available KV cache memory: -2.14 GiB",
        _ENGINE_DOWN], weights_gib=62)
    assert out.kind == "memory" and out.setting == "--gpu-memory-utilization"
    assert "cause not recognised" not in out.summary
    assert "2.14 GiB short" in out.summary and "activation peak" in out.summary
    # 0.9 (the default of 0.10.1) + 2.14 GiB + a first KV cache over 80 GiB
    assert "raise --gpu-memory-utilization to at least 0.94" in out.change
    assert "--max-num-batched-tokens" in out.change
    assert "--tensor-parallel-size 2 (this host reports 1 GPU)" in out.change


def test_a_shortfall_beyond_the_headroom_says_the_fraction_alone_is_not_enough():
    out = _explain(["vllm", "serve", "org/moe-120b", "--gpu-memory-utilization", "0.93"], [
        "INFO 08-20 18:04:22 [gpu_worker.py:276] Available KV cache memory: -4.50 GiB",
        _ENGINE_DOWN], weights_gib=62)
    assert out.operator_set is True and out.value == 0.93
    assert "short of the 4.50 GiB missing" in out.change
    assert "at least" not in out.change


def test_v0_profiling_summary_gives_weights_and_fraction_from_the_log():
    out = _explain(["python", "-m", "vllm.entrypoints.openai.api_server", "--model",
                    "org/vl-7b-awq"], [
        "INFO worker.py:295] the current vLLM instance can use total_gpu_memory (23.68GiB) x "
        "gpu_memory_utilization (0.90) = 21.31GiB",
        "INFO worker.py:295] model weights take 6.59GiB; non_torch_memory takes 8.29GiB; "
        "PyTorch activation peak memory takes 4.93GiB; the rest of the memory reserved for "
        "KV Cache is -7.83GiB.", _NO_BLOCKS], memory_gib=24, version="0.7.3")
    assert "6.6 GiB per GPU; as vLLM logged them" in out.summary
    assert "activation peak 4.93 GiB" in out.summary and "outside PyTorch 8.29" in out.summary
    assert "0.9 x 24.0 GiB" in out.summary and "7.83 GiB short" in out.summary


def test_weights_that_fit_never_ask_for_a_fraction_below_the_current_one():
    out = _explain(["vllm", "serve", "org/m-30b", "--gpu-memory-utilization", "0.9"],
                   [_NO_BLOCKS], weights_gib=56)
    assert "fit the memory vLLM may use" in out.summary
    assert "at least 0." not in out.change
    assert "--max-num-batched-tokens" in out.change


def test_a_positive_kv_figure_before_another_error_is_not_blamed():
    out = _explain(["vllm", "serve", "org/m-8b", "--tensor-parallel-size", "2"], [
        "INFO 11-30 10:00:01 [gpu_worker.py:1] Available KV cache memory: 20.5 GiB",
        "RuntimeError: NCCL error: unhandled cuda error"], count=2, weights_gib=16)
    assert out.kind != "memory" and "KV cache" not in out.summary
    assert out.setting != "--gpu-memory-utilization"


def test_a_positive_kv_figure_alone_stays_unrecognised():
    out = _explain(["vllm", "serve", "org/m-8b"], [
        "INFO 11-30 10:00:01 [gpu_worker.py:1] Available KV cache memory: 20.5 GiB",
        _ENGINE_DOWN], weights_gib=16)
    assert out.kind == "unrecognised" and out.setting is None


def test_a_checkpoint_shipped_in_mxfp4_is_sized_in_mxfp4():
    """gpt-oss checkpoints ship MXFP4 experts (models.yaml native_dtype): 120B parameters are
    about 60 GiB, not the 224 GiB of a bf16 reading, so they fit one 80 GB GPU."""
    argv = ["vllm", "serve", "openai/gpt-oss-120b"]
    failed = casekit.failed_start_of("1", argv, None, [_NO_BLOCKS])
    report = casekit.report_skeleton("memory", casekit._gpus(
        [{"name": "NVIDIA H100 80GB HBM3", "memory_gib": 80, "count": 1}], "g"))
    facts = facts_of(report, failed)
    assert "mxfp4" in facts["weights_source"]
    assert 55 * _GIB < facts["weights_bytes"] < 70 * _GIB
