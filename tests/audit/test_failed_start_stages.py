"""Failed starts whose log holds a build without kernels for the GPU, or only vLLM's start-up
wrapper lines (audit/kb/failed_start_stages.py), and compiled-extension lines that cut the
symbol off (audit/kb/failed_start_causes.py); every report is built here."""

from __future__ import annotations

import sys
from pathlib import Path

from audit.kb.failed_start_explain import explain
from audit.kb.failed_start_facts import facts_of

sys.path.insert(0, str(Path(__file__).resolve().parent))
import casekit  # noqa: E402

NO_KERNEL = "RuntimeError: CUDA error: no kernel image is available for execution on the device"
ENGINE_CORE = ("RuntimeError: Engine core initialization failed. See root cause above. "
               "Failed core proc(s): {}")


def _explain(lines: list[str], version: str | None, gpu: str | None = None, count: int = 1,
             argv: list[str] | None = None, cc: str | None = None):
    argv = argv or ["vllm", "serve", "Qwen/Qwen3-8B"]
    gpus = casekit._gpus([{"name": gpu, "memory_gib": 24, "count": count}] if gpu else [], "s")
    for entry in gpus:  # what NVML reports for a GPU the table does not list
        entry["compute_capability"] = cc or entry.get("compute_capability")
    report = casekit.report_skeleton("stages", gpus)
    failed = casekit.failed_start_of("1", argv, None, lines)
    report["failed_starts"] = [failed]
    return explain(failed["lines"], failed["argv"], version, facts=facts_of(report, failed))


# ----------------------------------------------------------------------------- kernels

def test_no_kernel_image_on_an_sm120_gpu_before_0_9_2_names_the_release() -> None:
    out = _explain([NO_KERNEL], "0.8.5", "NVIDIA GeForce RTX 5090")
    assert out.kind == "installation" and out.setting is None
    assert "SM12x" in out.summary and "sm_120" in out.summary
    assert "0.9.2" in out.change


def test_no_kernel_image_on_an_sm120_gpu_after_0_9_2_is_the_general_build_gap() -> None:
    out = _explain([NO_KERNEL], "0.12.0", "NVIDIA GeForce RTX 5090")
    assert out.kind == "installation" and "SM12x Blackwell GPU and vLLM" not in out.summary
    assert "sm_120" in out.change and "TORCH_CUDA_ARCH_LIST" in out.change


def test_no_kernel_image_on_a_pascal_gpu_says_it_is_below_vllms_minimum() -> None:
    out = _explain([NO_KERNEL], "0.6.3", "Tesla P40", cc="6.1")
    assert out.kind == "installation" and "below the compute capability 7.0" in out.summary


def test_no_kernel_image_on_an_amd_gpu_speaks_of_gfx_targets_not_cuda() -> None:
    """HIP's form of the error on an Instinct GPU: the advice is ROCm's (gfx targets,
    PYTORCH_ROCM_ARCH), never CUDA's compute capability or TORCH_CUDA_ARCH_LIST."""
    line = ("torch.AcceleratorError: HIP error: no kernel image is available for execution "
            "on the device")
    out = _explain([line], "0.14.0", "AMD Instinct MI355X")
    assert out.kind == "installation" and "HIP runtime" in out.checked
    assert "gfx target" in out.summary and "PYTORCH_ROCM_ARCH" in out.change
    assert "CUDA" not in out.checked + out.change and "TORCH_CUDA_ARCH_LIST" not in out.change


def test_pytorchs_capability_warning_reads_the_gpu_from_the_line() -> None:
    line = ("NVIDIA GeForce RTX 5070 Ti with CUDA capability sm_120 is not compatible with the "
            "current PyTorch installation. The current PyTorch install supports CUDA "
            "capabilities sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90.")
    out = _explain([line], "0.8.4")
    assert out.kind == "installation" and "SM12x" in out.summary
    assert "sm_50 sm_60" in out.checked


def test_an_unrelated_cuda_error_is_not_read_as_a_missing_kernel() -> None:
    out = _explain(["RuntimeError: CUDA error: an illegal memory access was encountered"],
                   "0.12.0", "NVIDIA H100 80GB HBM3")
    assert out.kind != "installation" and "kernel compiled" not in out.summary


# ----------------------------------------------------------------------------- wrappers

def test_engine_core_wrapper_alone_says_where_the_real_error_is() -> None:
    out = _explain([ENGINE_CORE], "0.11.0", "NVIDIA L40S")
    assert out.kind == "exception"
    assert "only vLLM's start-up wrapper" in out.summary
    assert "first Traceback" in out.change and "EngineCore_DP0" in out.change


def test_a_worker_method_names_the_stage_and_what_fails_there() -> None:
    out = _explain(["ERROR 04-28 15:55:45 worker_base.py:157] Error executing method "
                    "initialize_cache. This might cause deadlock in distributed execution."],
                   "0.4.1", "NVIDIA L40", count=2,
                   argv=["vllm", "serve", "org/m-33b", "--tensor-parallel-size", "2"])
    assert "initialize_cache" in out.summary and "KV cache" in out.summary
    assert "No available memory for the cache blocks" in out.change


def test_v0_worker_device_setup_points_at_nccl_and_visibility() -> None:
    out = _explain(["Exception in worker VllmWorkerProcess while processing method "
                    "init_device."], "0.6.4.post1", "NVIDIA A100-SXM4-80GB", count=4,
                   argv=["vllm", "serve", "org/m-72b", "--tensor-parallel-size", "4"])
    assert "init_device" in out.summary and "NCCL" in out.change


def test_a_quoted_root_cause_keeps_its_own_explanation() -> None:
    """Near miss: the wrapper follows the real exception; the exception decides."""
    out = _explain(["KeyError: 'lm_head.weight'", ENGINE_CORE], "0.11.0", "NVIDIA L40S")
    assert "start-up wrapper" not in out.summary and "lm_head.weight" in out.summary


def test_a_memory_cause_found_under_the_wrapper_is_not_replaced() -> None:
    out = _explain(["ValueError: No available memory for the cache blocks. Try increasing "
                    "`gpu_memory_utilization` when initializing the engine.", ENGINE_CORE],
                   "0.11.0", "NVIDIA L40S")
    assert "start-up wrapper" not in out.summary


# ----------------------------------------------------------------------------- extension

def test_an_undefined_symbol_cut_off_in_the_quote_is_still_the_installation() -> None:
    out = _explain(["ImportError: <checkout>/vllm/_C.cpython-310-x86_64-linux-gnu.so: "
                    "undefined symbol:"], "0.6.3", "NVIDIA A100-SXM4-80GB")
    assert out.kind == "installation" and "vllm._C" in out.summary
    assert "not quoted" in out.summary
