"""A start that failed because the process saw no GPU, or not the one CUDA_VISIBLE_DEVICES
named (audit/kb/failed_start_devices.py); every report is built here."""

from __future__ import annotations

import sys
from pathlib import Path

from audit.kb.failed_start_explain import explain
from audit.kb.failed_start_facts import facts_of

sys.path.insert(0, str(Path(__file__).resolve().parent))
import casekit  # noqa: E402

ARGV = ["vllm", "serve", "meta-llama/Llama-3.1-70B-Instruct", "--tensor-parallel-size", "2"]
NO_GPU = "RuntimeError: No CUDA GPUs are available"
NVML = "pynvml.NVMLError_InvalidArgument: Invalid Argument"


def _explain(lines: list[str], env: dict | None = None, gpus: int = 2):
    report = casekit.report_skeleton(
        "devices", casekit._gpus([{"name": "NVIDIA A100-SXM4-80GB", "memory_gib": 80,
                                   "count": gpus}] if gpus else [], "d"))
    failed = casekit.failed_start_of("1", ARGV, None, lines)
    report["failed_starts"] = [failed]
    return explain(failed["lines"], failed["argv"], "0.9.1", env=env,
                   facts=facts_of(report, failed))


def test_host_numbers_inside_a_container_given_two_gpus_are_named() -> None:
    out = _explain([NVML], env={"NVIDIA_VISIBLE_DEVICES": "2,3", "CUDA_VISIBLE_DEVICES": "2,3"})
    assert out.kind == "environment"
    assert out.setting == "env:CUDA_VISIBLE_DEVICES" and out.value == "2,3"
    assert "numbers 0-1" in out.summary
    assert "drop it there" in out.change


def test_no_gpu_seen_while_the_host_has_gpus_says_they_were_not_passed() -> None:
    out = _explain(["Traceback (most recent call last):", NO_GPU])
    assert out.kind == "environment" and out.setting is None
    assert "could not see any GPU" in out.summary and "2 GPU(s)" in out.summary
    assert "nvidia.com/gpu" in out.change and "--gpus" in out.change


def test_an_empty_cuda_visible_devices_is_the_setting_to_change() -> None:
    out = _explain([NO_GPU], env={"CUDA_VISIBLE_DEVICES": ""})
    assert out.setting == "env:CUDA_VISIBLE_DEVICES" and "hides every GPU" in out.summary


def test_an_index_past_the_hosts_gpus_is_named() -> None:
    out = _explain(["RuntimeError: CUDA error: no CUDA-capable device is detected"],
                   env={"CUDA_VISIBLE_DEVICES": "4"}, gpus=2)
    assert out.setting == "env:CUDA_VISIBLE_DEVICES" and "names GPU 4" in out.summary


def test_valid_indices_are_not_blamed() -> None:
    out = _explain([NO_GPU], env={"CUDA_VISIBLE_DEVICES": "0,1"}, gpus=2)
    assert out.kind == "environment" and out.setting is None


def test_other_errors_are_left_to_their_own_causes() -> None:
    out = _explain(["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"])
    assert out.kind != "environment"


def test_nccl_system_error_points_at_shared_memory_and_transport() -> None:
    out = _explain(["torch.distributed.DistBackendError: NCCL error in: "
                    "ProcessGroupNCCL.cpp:1333, unhandled system error (run with "
                    "NCCL_DEBUG=INFO for details), NCCL version 2.18.1"])
    assert out.kind == "environment" and out.setting is None
    assert "/dev/shm" in out.summary
    assert "NCCL_DEBUG=INFO" in out.change and "--ipc=host" in out.change


def test_nccl_cuda_error_points_at_peer_to_peer() -> None:
    out = _explain(["[rank0]: RuntimeError: NCCL error: unhandled cuda error "
                    "(run with NCCL_DEBUG=INFO for details)"])
    assert out.kind == "environment" and "peer-to-peer" in out.summary
    assert "NCCL_P2P_DISABLE=1" in out.change


def test_other_nccl_errors_are_not_given_these_causes() -> None:
    out = _explain(["RuntimeError: NCCL error: invalid usage (run with NCCL_DEBUG=WARN)"])
    assert out.kind != "environment"
