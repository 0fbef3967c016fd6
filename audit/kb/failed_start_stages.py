"""Two failed-start causes that recur in public reports and that vLLM's raise sites cannot
name: a build without kernels for the GPU, and a log excerpt that holds only vLLM's
start-up wrapper lines.

* :func:`no_kernel_for_gpu`: CUDA's "no kernel image is available for execution on the
  device" (``cudaErrorNoKernelImageForDevice``, error 209: the binary holds no kernel compiled
  for this device's architecture; CUDA Runtime API, Data types, ``cudaError``:
  https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html) and PyTorch's
  warning "<GPU> with CUDA capability sm_XY is not compatible with the current PyTorch
  installation. The current PyTorch install supports CUDA capabilities ..."
  (``torch/cuda/__init__.py``, the capability check PyTorch runs when CUDA is first used:
  https://github.com/pytorch/pytorch/blob/main/torch/cuda/__init__.py). The installed build
  (vLLM's compiled kernels, PyTorch, or one kernel library of a feature path) was not
  compiled for the GPU's compute capability. vLLM supports GPUs of compute capability 7.0 and
  up (https://docs.vllm.ai/en/latest/getting_started/installation/gpu.html); SM12x Blackwell
  GPUs have kernels in the wheels and images from about 0.9.2 on (the rule
  ``up-sm12x-build-without-kernels``, audit/rules/gpus_platforms.yaml, and its references); a
  source build compiles for the architectures of ``TORCH_CUDA_ARCH_LIST`` (vLLM's
  installation docs, "Build wheel from source"). Not a vLLM setting: the change is the build.
* :func:`wrapper_stage`: a log excerpt whose error lines are only vLLM's start-up wrappers:
  the API server's ``RuntimeError("Engine core initialization failed. See root cause
  above. ...")`` (``vllm/v1/engine/utils.py`` ``wait_for_engine_startup``, raised when an
  engine-core process exits during the handshake), the engine core's "EngineCore failed to
  start." (``vllm/v1/engine/core.py`` ``run_engine_core``, ``logger.exception`` before the
  re-raise), a worker's "WorkerProc failed to start."
  (``vllm/v1/executor/multiproc_executor.py``), V0's "Error executing method 'M'. This might
  cause deadlock in distributed execution." (``vllm/worker/worker_base.py``
  ``execute_method``) and "Exception in worker P while processing method M."
  (``vllm/executor/multiproc_worker_utils.py``), all read in the 0.11.0 and 0.6.4.post1
  wheels. The exception that stopped the start was printed above them by the process that
  died; when the excerpt lacks it, the method name still tells the start-up stage, and the
  stage tells what to look for (read in the same wheels: ``init_device`` binds the GPU,
  checks the dtype and sets up the distributed/NCCL group; ``load_model`` loads the
  weights; ``determine_num_available_blocks`` / ``determine_available_memory`` run the
  memory-profiling forward pass; ``initialize_cache`` / ``initialize_from_config`` allocate
  the KV cache (V0 then warms the model up and captures CUDA graphs);
  ``compile_or_warm_up_model`` compiles and captures CUDA graphs).

Each returns the :class:`audit.kb.failed_start_explain.Explanation` fields to set, or None.
"""

from __future__ import annotations

import re
from typing import Any

from audit.kb.failed_start_causes import installation_cause
from audit.kb.versions import version_tuple

# ----------------------------------------------------------------------------- kernels

_NO_KERNEL = re.compile(r"no kernel image is available for execution on the device|"
                        r"cudaErrorNoKernelImageForDevice", re.I)
_TORCH_ARCH = re.compile(r"with CUDA capability sm_(\d+) is not compatible with the current "
                         r"PyTorch installation(?:.*?supports CUDA capabilities ([\w ]+))?",
                         re.I)
#: HIP's form of the error (ROCm): the kernels are per gfx target, not per compute capability.
_HIP = re.compile(r"\bHIP error\b|hipErrorNoBinaryForGpu|\bROCm\b", re.I)
#: vLLM's minimum compute capability (installation docs, GPU requirements).
MIN_CC = 7.0
#: The first release whose CUDA wheels and images carry SM12x kernels (see the module
#: docstring: the rule ``up-sm12x-build-without-kernels``).
SM12X_FROM = "0.9.2"


def _sm(cc: float) -> str:
    """8.6 -> "sm_86"."""
    return f"sm_{int(round(cc * 10))}"


def no_kernel_for_gpu(lines: list[str], facts: dict[str, Any],
                      version: str | None) -> dict[str, Any] | None:
    """Explanation fields for a start stopped because the installed build holds no kernel
    for the GPU's compute capability; None when the log says nothing of the kind."""
    for line in reversed(lines):
        torch = _TORCH_ARCH.search(line)
        if torch or _NO_KERNEL.search(line):
            break
    else:
        return None
    cc = facts.get("cc")
    if cc is None and torch:
        digits = torch[1]
        cc = float(f"{digits[:-1]}.{digits[-1]}")
    gpu = facts.get("gpu_name") or "this GPU"
    what = f"{gpu} (compute capability {cc:.1f}, {_sm(cc)})" if cc else gpu
    quant = facts.get("quant_method") or facts.get("quantization")
    if facts.get("platform") == "rocm" or _HIP.search(line):
        return _no_kernel_rocm(line, gpu, quant)
    have = version_tuple(version)
    checked = ("the CUDA runtime found no kernel compiled for this GPU's architecture in the "
               "binary it was asked to run (cudaErrorNoKernelImageForDevice)"
               if not torch else "PyTorch compares the GPU's compute capability with the "
               "architectures its build was compiled for" + (
                   f" ({torch[2].strip()})" if torch[2] else ""))
    if cc is not None and cc < MIN_CC:
        summary = (f"{what} is below the compute capability {MIN_CC:.1f} vLLM builds its "
                   "kernels for: the GPU cannot run vLLM's CUDA build")
        change = (f"serve on a GPU of compute capability {MIN_CC:.1f} or newer (Volta and "
                  "later); vLLM's CUDA wheels and images carry no kernels for older GPUs")
    elif cc is not None and 12.0 <= cc < 13.0 and have is not None \
            and have < version_tuple(SM12X_FROM):
        summary = (f"{what} is an SM12x Blackwell GPU and vLLM {version} was built without "
                   f"SM12x kernels (they came with the CUDA 12.8 builds of {SM12X_FROM})")
        change = (f"install vLLM {SM12X_FROM} or newer built for CUDA 12.8 or later (a current "
                  "vllm/vllm-openai image, or the cu128/cu129/cu130 wheel with its PyTorch)")
    else:
        summary = (f"the installed build has no kernel compiled for {what}: vLLM's wheel or "
                   "image, its PyTorch, or the kernel library of one feature path"
                   + (f" (this checkpoint's {quant} kernels)" if quant else "")
                   + " was built for other GPU architectures")
        arch = f" includes {_sm(cc)}" if cc else " includes this GPU's sm_XY"
        change = ("check that python -c \"import torch; print(torch.cuda.get_arch_list())\""
                  f"{arch} and that the vLLM wheel or image was built for that PyTorch/CUDA; "
                  "install a release whose build includes this GPU (a newer wheel or image), "
                  "or build vLLM from source with TORCH_CUDA_ARCH_LIST set to this GPU's "
                  "capability" + ("; if only one feature fails, try another quantization "
                                  "format or attention backend" if quant else ""))
    return installation_cause(line, checked=checked,
                              summary=summary + ": an installation problem, not a setting",
                              change=change)


def _no_kernel_rocm(line: str, gpu: str, quant: str | None) -> dict[str, Any]:
    """The same failure on an AMD GPU: ROCm builds carry kernels per gfx target
    (``PYTORCH_ROCM_ARCH``, vLLM's ROCm installation docs), not per CUDA compute
    capability."""
    return installation_cause(
        line,
        checked="the HIP runtime found no kernel compiled for this GPU's gfx target in the "
                "binary it was asked to run",
        summary=f"the installed ROCm build has no kernel compiled for {gpu}'s gfx target: "
                "vLLM's wheel or image, its PyTorch, or the kernel library of one feature path"
                + (f" (this checkpoint's {quant} kernels)" if quant else "")
                + " was built for other AMD GPU architectures: an installation problem, not a "
                "setting",
        change="check that the ROCm image or build of vLLM and PyTorch lists this GPU's gfx "
               "target (PYTORCH_ROCM_ARCH when building from source); install an image built "
               "for it" + ("; if only one feature fails, try another quantization format or "
                           "attention backend" if quant else ""))


# ----------------------------------------------------------------------------- wrappers

_PROCESS_WRAPPER = re.compile(
    r"Engine core initialization failed|EngineCore failed to start|"
    r"WorkerProc failed to start|Engine process failed to start", re.I)
_METHOD = re.compile(r"Error executing method '?(\w+)'?\. This might cause deadlock|"
                     r"while processing method (\w+)", re.I)
_PROFILING = (
    "the memory-profiling forward pass",
    "CUDA out of memory in the profiling pass (lower --max-num-batched-tokens or "
    "--max-model-len), or a kernel failing on its first use")
#: Start-up stage of each worker method (module docstring), and what fails there.
STAGES: dict[str, tuple[str, str]] = {
    "init_device": (
        "the workers' device set-up (binding each worker to its GPU, checking the dtype, "
        "creating the distributed NCCL group)",
        "an NCCL error between tensor/pipeline-parallel workers (run again with "
        "NCCL_DEBUG=INFO; in a container give it shared memory with --ipc=host or "
        "--shm-size), a GPU the process cannot see or that another process holds "
        "(nvidia-smi), or a dtype the GPU lacks"),
    "load_model": (
        "loading the weights onto the GPUs",
        "CUDA out of memory for the weights (tensor parallelism or a smaller/quantized "
        "checkpoint), or a checkpoint the loader cannot read (missing or renamed weight "
        "names, an unsupported quantization)"),
    # V0's and V1's names of the same profiling step
    "determine_num_available_blocks": _PROFILING,
    "determine_available_memory": _PROFILING,
    "initialize_cache": (
        "allocating the KV cache (and, before the V1 engine, warming up and capturing CUDA "
        "graphs)",
        "no room for the KV cache (\"No available memory for the cache blocks\", or "
        "--max-model-len above what the KV cache holds) or CUDA out of memory while "
        "capturing CUDA graphs (--enforce-eager tells)"),
    "initialize_from_config": (
        "allocating the KV cache",
        "no room for the KV cache at this --max-model-len and --gpu-memory-utilization"),
    "compile_or_warm_up_model": (
        "compiling the model and capturing CUDA graphs",
        "a torch.compile or CUDA graph capture failure, or CUDA out of memory while "
        "capturing (--enforce-eager tells)"),
}


def wrapper_stage(lines: list[str], facts: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """Explanation fields (``checked``, ``summary``, ``change``) for an excerpt whose error
    lines are only vLLM's start-up wrappers; None when there is no wrapper line."""
    facts = facts or {}
    method = next((m[1] or m[2] for x in reversed(lines) for m in [_METHOD.search(x)] if m),
                  None)
    wrapper = next((x for x in reversed(lines) if _PROCESS_WRAPPER.search(x)), None)
    if method is None and wrapper is None:
        return None
    stage = STAGES.get(method or "")
    workers = (facts.get("tp") or 1) * (facts.get("pp") or 1)
    where = (f"a worker failed in {method}, {stage[0]}" if stage else
             f"a worker failed in its {method} step" if method else
             "the engine-core process (or one of its workers) exited during start-up")
    look = ("read the unit or container log above this line for the first Traceback or "
            "ERROR line of the engine core or a worker (EngineCore_DP0, VllmWorker, "
            "RayWorkerWrapper); that exception is the cause")
    if stage:
        look += f"; at this stage look for {stage[1]}"
    elif workers > 1:
        look += (f"; with {workers} workers, check first that every GPU is visible and free "
                 "and the NCCL set-up (NCCL_DEBUG=INFO)")
    return dict(
        checked=("vLLM's start-up wrapper reports that another process failed; the log "
                 "excerpt holds no exception of that process"),
        summary=(f"the excerpt holds only vLLM's start-up wrapper: {where}, and printed its "
                 "own error earlier in the log, which the excerpt does not include"),
        change=look)
