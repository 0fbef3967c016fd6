"""GPU readings through nvidia-ml-py (``import pynvml``) or a recorded reading file.

NVML calls and error classes: ``docs/vllm-facts.md`` section 7 ([NVML]
nvidia-ml-py 13.615.71). A reading is a plain dict so it can be recorded on a GPU node
(the output of ``fleet-agent collect --print`` on a GPU node, or :func:`read_nvml`'s
dict dumped as JSON, is a ``--gpu-source FILE.json``) and replayed in tests::

    {"driver_version": "580.95.05", "cuda_driver_version": "13.0",
     "gpus": [{GpuInfo fields...}],
     "processes": [{"gpu_uuid": "GPU-...", "pid": 4242, "used_memory_bytes": 123}],
     "error": null}

No NVML library or no driver gives ``error`` set and empty lists; a field the GPU
does not support (``NVMLError_NotSupported``) is None. Nothing here raises.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from fleet_agent.gpus_amd import read_amdsmi

#: NVML constants used below (pynvml: NVML_TEMPERATURE_GPU = 0,
#: NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1, NVML_VOLATILE_ECC = 0).
_TEMPERATURE_GPU = 0
_ERROR_UNCORRECTED = 1
_VOLATILE_ECC = 0


def empty_reading(error: str | None) -> dict[str, Any]:
    """A reading with no GPUs and ``error`` as the reason."""
    return {"driver_version": None, "cuda_driver_version": None, "gpus": [],
            "processes": [], "error": error}


def cuda_version_text(value: int | None) -> str | None:
    """NVML's CUDA driver version integer as text.

    ``12080`` -> ``"12.8"``, ``13000`` -> ``"13.0"``; None/0 -> None.
    """
    if not value:
        return None
    return f"{value // 1000}.{(value % 1000) // 10}"


def read_source(source: str) -> dict[str, Any]:
    """Reading from ``nvml`` (NVML, else AMD SMI when NVML finds no driver), ``amdsmi``,
    ``none`` (GPUs not collected) or a recorded JSON file path."""
    if source == "nvml":  # NVIDIA first; AMD SMI where NVML finds no driver
        return read_nvml_or_amd()
    if source == "amdsmi":
        return read_amdsmi()
    if source == "none":
        return empty_reading("GPU collection disabled (--gpu-source none)")
    try:
        data = json.loads(Path(source).read_text())
    except (OSError, ValueError, RecursionError) as exc:
        return empty_reading(f"recorded GPU reading {source} unreadable: {exc}")
    if isinstance(data, dict) and "schema_version" in data:
        data = reading_from_report(data)  # a whole `collect --print` output
    reading = empty_reading(None)
    reading.update({k: data.get(k, reading[k]) for k in reading} if isinstance(data, dict) else {})
    if isinstance(data, dict) and data.get("amd_driver_version"):
        reading["amd_driver_version"] = data["amd_driver_version"]
    return reading


def read_nvml_or_amd(nvml: Any = None, amdsmi: Any = None) -> dict[str, Any]:
    """NVML's reading; when NVML fails without GPUs (no NVIDIA driver), AMD SMI's if it finds
    GPUs, else NVML's reading with both reasons in ``error``."""
    reading = read_nvml(nvml)
    if reading["gpus"] or reading["error"] is None:
        return reading
    amd = read_amdsmi(amdsmi)
    if amd["gpus"]:
        return amd
    reading["error"] = f"{reading['error']}; {amd['error'] or 'AMD SMI found no GPU'}"
    return reading


def reading_from_report(report: dict[str, Any]) -> dict[str, Any]:
    """Rebuild a reading from a report dict (``gpus``, ``gpu_processes``, host driver fields)."""
    host = report.get("host") or {}
    return {"driver_version": host.get("nvidia_driver_version"),
            "cuda_driver_version": host.get("cuda_driver_version"),
            "amd_driver_version": host.get("amd_driver_version"),
            "gpus": report.get("gpus") or [], "processes": report.get("gpu_processes") or [],
            "error": report.get("gpu_error")}


def read_nvml(nvml: Any = None) -> dict[str, Any]:
    """Read every GPU through NVML. ``nvml`` is the ``pynvml`` module (injectable for tests)."""
    if nvml is None:
        try:
            import pynvml as nvml  # noqa: PLC0415 - optional at runtime, GPU nodes only
        except ImportError as exc:
            return empty_reading(f"nvidia-ml-py not importable: {exc}")
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound / DriverNotLoaded / OSError
        return empty_reading(f"NVML init failed: {_nvml_text(exc)} (no NVIDIA driver or GPU?)")
    try:
        return _read_devices(nvml)
    except Exception as exc:  # a lost GPU mid-read must not kill the cycle
        return empty_reading(f"NVML read failed: {_nvml_text(exc)}")
    finally:
        with contextlib.suppress(Exception):  # nothing useful to do when shutdown fails
            nvml.nvmlShutdown()


def _nvml_text(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"


def _field(func, *args: Any) -> Any:
    """Call one NVML getter; None when unsupported or failing (per-field tolerance)."""
    try:
        return func(*args)
    except Exception:
        return None


def _read_devices(nvml: Any) -> dict[str, Any]:
    reading = empty_reading(None)
    reading["driver_version"] = _field(nvml.nvmlSystemGetDriverVersion)
    reading["cuda_driver_version"] = cuda_version_text(
        _field(nvml.nvmlSystemGetCudaDriverVersion_v2)
        or _field(nvml.nvmlSystemGetCudaDriverVersion))
    for index in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        gpu = _read_device(nvml, index, handle)
        reading["gpus"].append(gpu)
        for proc in _field(nvml.nvmlDeviceGetComputeRunningProcesses, handle) or []:
            used = getattr(proc, "usedGpuMemory", None)
            reading["processes"].append({"gpu_uuid": gpu["uuid"], "pid": int(proc.pid),
                                         "used_memory_bytes": used if isinstance(used, int)
                                         else None})
    return reading


def _read_device(nvml: Any, index: int, handle: Any) -> dict[str, Any]:
    memory = _field(nvml.nvmlDeviceGetMemoryInfo, handle)
    util = _field(nvml.nvmlDeviceGetUtilizationRates, handle)
    capability = _field(nvml.nvmlDeviceGetCudaComputeCapability, handle)
    power = _field(nvml.nvmlDeviceGetPowerUsage, handle)
    limit = _field(nvml.nvmlDeviceGetEnforcedPowerLimit, handle)
    return {
        "index": index,
        "uuid": _text(_field(nvml.nvmlDeviceGetUUID, handle)) or f"unknown-{index}",
        "name": _text(_field(nvml.nvmlDeviceGetName, handle)) or "unknown",
        "memory_total_bytes": getattr(memory, "total", None),
        "memory_used_bytes": getattr(memory, "used", None),
        "compute_capability": f"{capability[0]}.{capability[1]}" if capability else None,
        "utilization_gpu_pct": getattr(util, "gpu", None),
        "temperature_c": _field(nvml.nvmlDeviceGetTemperature, handle, _TEMPERATURE_GPU),
        "power_draw_w": power / 1000.0 if isinstance(power, int | float) else None,  # mW
        "power_limit_w": limit / 1000.0 if isinstance(limit, int | float) else None,  # mW
        "ecc_errors_uncorrected": _field(nvml.nvmlDeviceGetTotalEccErrors, handle,
                                         _ERROR_UNCORRECTED, _VOLATILE_ECC),
    }


def _text(value: Any) -> str | None:
    if isinstance(value, bytes):  # very old bindings returned bytes
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else None


def owners(processes: list[dict[str, Any]], ancestors,
           server_pids: set[int]) -> dict[int, list[str]]:
    """Map server pid -> GPU uuids it holds, walking each GPU process's ppid chain.

    ``ancestors(pid)`` returns the parent chain (nearest first); a GPU process that is
    itself a server (rare: external launcher) counts too.
    """
    out: dict[int, list[str]] = {}
    for proc in processes:
        pid = proc.get("pid")
        if not isinstance(pid, int):
            continue
        for candidate in [pid, *ancestors(pid)]:
            if candidate in server_pids:
                uuids = out.setdefault(candidate, [])
                if proc.get("gpu_uuid") and proc["gpu_uuid"] not in uuids:
                    uuids.append(proc["gpu_uuid"])
                break
    return out
