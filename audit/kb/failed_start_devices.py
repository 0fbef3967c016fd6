"""A failed start whose process could not see the GPUs it was meant to use.

Two error lines say so, each from a different library:

* PyTorch's "No CUDA GPUs are available" (``c10/cuda/CUDAFunctions.cpp``,
  ``device_count_ensure_non_zero``: the CUDA runtime counted zero devices) and the CUDA
  runtime's own "no CUDA-capable device is detected" (``cudaErrorNoDevice``, error 100): the
  process saw no GPU at all although the driver answered.
* pynvml's ``NVMLError_InvalidArgument`` ("Invalid Argument") during start-up: vLLM's CUDA
  platform turns a worker's device number into a physical index through
  ``CUDA_VISIBLE_DEVICES`` and asks NVML for that index (read from the wheel: vllm-0.9.1
  ``vllm/platforms/interface.py`` ``device_id_to_physical_device_id`` and
  ``vllm/platforms/cuda.py`` ``nvmlDeviceGetHandleByIndex``; vLLM's comment there: NVML is
  not affected by ``CUDA_VISIBLE_DEVICES``). NVML numbers only the GPUs it can see, so an
  index NVML lacks means ``CUDA_VISIBLE_DEVICES`` names a GPU this process cannot see.

The usual way there: a container given some of the host's GPUs (``docker run --gpus
'"device=2,3"'``, ``NVIDIA_VISIBLE_DEVICES=2,3``) sees them as 0..n-1, so a
``CUDA_VISIBLE_DEVICES`` written with the host's numbers points past them (NVIDIA Container
Toolkit, "Specialized Configurations with Docker", GPU enumeration:
https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/docker-specialized.html);
a container or pod started without any GPU (no ``--gpus``/``--runtime=nvidia``; Kubernetes
without an ``nvidia.com/gpu`` limit: https://kubernetes.io/docs/tasks/manage-gpus/scheduling-gpus/);
an empty ``CUDA_VISIBLE_DEVICES`` (vLLM's own message for that case points at Ray workers,
https://github.com/vllm-project/vllm/issues/8402). Not a vLLM setting: the change is the
process's GPU visibility.
"""

from __future__ import annotations

import re
from typing import Any

_NO_DEVICE = re.compile(r"No CUDA GPUs are available|no CUDA-capable device is detected|"
                        r"cudaErrorNoDevice", re.I)
_NVML_INDEX = re.compile(r"NVMLError_InvalidArgument|NVML\w*:? Invalid Argument", re.I)

_CHANGE = ("give the process the GPUs it should use: a container needs them passed "
           "(docker --gpus or --runtime=nvidia with NVIDIA_VISIBLE_DEVICES; Kubernetes an "
           "nvidia.com/gpu limit), and CUDA_VISIBLE_DEVICES, if set, must name GPUs that exist "
           "where vLLM runs (inside a container that got some of the host's GPUs they are "
           "numbered from 0, so drop it there or write 0,1,...); check with nvidia-smi in the "
           "same container or unit")


def _indices(value: str) -> list[int] | None:
    """Numeric entries of a CUDA_VISIBLE_DEVICES value (None when any entry is a UUID)."""
    parts = [p.strip() for p in value.split(",") if p.strip()]
    if not parts or not all(p.isdigit() for p in parts):
        return None
    return [int(p) for p in parts]


def _visible(env: dict[str, str], facts: dict[str, Any]) -> tuple[str | None, str | None]:
    """(what CUDA_VISIBLE_DEVICES does wrong, its value), or (None, value) when it looks fine
    or is unset."""
    if "CUDA_VISIBLE_DEVICES" not in env:
        return None, None
    value = str(env["CUDA_VISIBLE_DEVICES"])
    if not value.strip() or value.strip() in ("-1", "none", "NoDevFiles"):
        return f"CUDA_VISIBLE_DEVICES={value!r} hides every GPU from the process", value
    indices = _indices(value)
    given = _indices(str(env.get("NVIDIA_VISIBLE_DEVICES") or ""))
    if indices and given and max(indices) >= len(given):
        return (f"CUDA_VISIBLE_DEVICES={value} uses the host's numbers, but the container got "
                f"{len(given)} GPU(s) (NVIDIA_VISIBLE_DEVICES={env['NVIDIA_VISIBLE_DEVICES']}),"
                f" which it numbers 0-{len(given) - 1}"), value
    count = facts.get("gpu_count")
    if indices and count and max(indices) >= count:
        return (f"CUDA_VISIBLE_DEVICES={value} names GPU {max(indices)}, but the report shows "
                f"{count} GPU(s) (0-{count - 1}) where it runs"), value
    return None, value


def gpu_not_visible(lines: list[str], env: dict[str, str] | None,
                    facts: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """Explanation fields for a start that failed because the process saw no GPU, or not the
    one ``CUDA_VISIBLE_DEVICES`` named; None when the log says neither."""
    facts, env = facts or {}, env or {}
    nvml = next((x for x in reversed(lines) if _NVML_INDEX.search(x)), None)
    none = next((x for x in reversed(lines) if _NO_DEVICE.search(x)), None)
    line = none or nvml
    if line is None:
        return None
    wrong, value = _visible(env, facts)
    if line is none:
        checked = ("PyTorch found no CUDA device for this process (the CUDA runtime counted "
                   "zero GPUs) although the driver answered")
        summary = "the vLLM process could not see any GPU"
    else:
        checked = ("vLLM looks each worker's GPU up in NVML by the index CUDA_VISIBLE_DEVICES "
                   "gives it; NVML ignores CUDA_VISIBLE_DEVICES and has no GPU at that index")
        summary = "CUDA_VISIBLE_DEVICES names a GPU the vLLM process cannot see"
    count = facts.get("gpu_count")
    if wrong:
        summary += f": {wrong}"
    elif count and line is none:
        summary += (f"; the agent sees {count} GPU(s) on this host, so they exist but were "
                    "not passed to the process (container/pod GPU request, "
                    "CUDA_VISIBLE_DEVICES)")
    out = dict(kind="environment", error_line=line, checked=checked, summary=summary,
               change=_CHANGE)
    if wrong or (value is not None and line is nvml):
        out.update(setting="env:CUDA_VISIBLE_DEVICES", value=value)
    return out


# ----------------------------------------------------------------------------- NCCL

#: NCCL's result codes as PyTorch prints them ("NCCL error: unhandled system error",
#: ``ncclSystemError``; "unhandled cuda error", ``ncclUnhandledCudaError``): NCCL's API docs
#: (ncclResult_t: a call to the system failed / a call to CUDA failed) and its
#: Troubleshooting page (https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html:
#: NCCL_DEBUG=INFO prints the failing call; in Docker, NCCL's shared-memory transport needs
#: more /dev/shm than the 64 MB default, so run with --ipc=host or a larger --shm-size;
#: peer-to-peer between GPUs can be refused by the platform, NCCL_P2P_DISABLE=1 tests it;
#: NCCL_IB_DISABLE=1 / NCCL_SOCKET_IFNAME pick the network transport).
_NCCL = re.compile(r"\bNCCL\b|\bnccl\w*Error\b", re.I)
#: (the result code's words, checked, summary, change) for the two codes explained here.
_NCCL_CAUSES = (
    (re.compile(r"unhandled system error|\bncclSystemError\b", re.I),
     "NCCL, setting up the communicator between vLLM's parallel workers, reported that a call "
     "to the operating system failed (ncclSystemError)",
     "NCCL could not set up communication between the GPUs: a system call failed, commonly "
     "shared memory (/dev/shm) too small inside a container, or the network transport between "
     "nodes (sockets, InfiniBand/RoCE)",
     "run the start again with NCCL_DEBUG=INFO to see the call that failed; in a container "
     "give it shared memory (docker --ipc=host or --shm-size of a few GB); across nodes set "
     "NCCL_SOCKET_IFNAME to the interface the nodes share and try NCCL_IB_DISABLE=1 to rule "
     "out InfiniBand/RoCE"),
    (re.compile(r"unhandled cuda error|\bncclUnhandledCudaError\b", re.I),
     "NCCL, setting up the communicator between vLLM's parallel workers, reported that a CUDA "
     "call failed (ncclUnhandledCudaError)",
     "NCCL could not set up communication between the GPUs: a CUDA call inside NCCL failed, "
     "commonly direct peer-to-peer access between the GPUs that the platform refuses (PCIe "
     "ACS/IOMMU, virtual machines), or GPUs that are busy or unusable for another process",
     "run the start again with NCCL_DEBUG=INFO to see the CUDA call that failed; try "
     "NCCL_P2P_DISABLE=1 (peer-to-peer off, slower but it tells the cause), and check with "
     "nvidia-smi that the GPUs are free and healthy"),
)


def nccl_failed(lines: list[str]) -> dict[str, Any] | None:
    """Explanation fields for a start that NCCL stopped while the tensor/pipeline-parallel
    workers set up their communicator: the host's transports, not a vLLM setting."""
    for line in reversed(lines):
        if not _NCCL.search(line):
            continue
        for words, checked, summary, change in _NCCL_CAUSES:
            if words.search(line):
                return dict(kind="environment", error_line=line, checked=checked,
                            summary=summary, change=change)
    return None
