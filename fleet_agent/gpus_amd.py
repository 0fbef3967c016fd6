"""AMD GPU readings through AMD SMI (``import amdsmi``, the ``amd`` extra), used where NVML is
absent. Same reading shape as :mod:`fleet_agent.gpus` (``gpus``, ``processes``,
``error``) plus ``amd_driver_version``; each GPU carries ``gfx_arch`` (``gfx942``) in place of
a compute capability and ``vendor: "amd"``.

AMD SMI talks to the amdgpu driver (``/dev/kfd``, ``/dev/dri``): the module is injectable so
tests pass a fake one. Calls and units, from the amdsmi Python package
(``amdsmi_interface.py``, ROCm 6.x/7.x): ``amdsmi_get_gpu_asic_info`` -> ``market_name``,
``target_graphics_version`` (``"gfx942"``); ``amdsmi_get_gpu_memory_total/usage(h, VRAM)``
in bytes; ``amdsmi_get_gpu_activity`` -> ``gfx_activity`` in %; ``amdsmi_get_temp_metric``
in °C (HOTSPOT, the junction sensor MI300 reports; EDGE on boards without it);
``amdsmi_get_power_info`` -> ``socket_power``/``current_socket_power``/
``average_socket_power`` in W (which one is set depends on the ASIC) and ``power_limit`` in W;
``amdsmi_get_power_cap_info`` -> ``power_cap`` in µW; ``amdsmi_get_gpu_process_list`` ->
``pid`` and ``memory_usage.vram_mem`` in bytes (pids in the host pid namespace, read from
KFD); ``"N/A"`` marks an unsupported value. Nothing here raises.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any


def read_amdsmi(amdsmi: Any = None) -> dict[str, Any]:
    """Read every AMD GPU. ``amdsmi`` is the module (injectable for tests)."""
    if amdsmi is None:
        try:
            # amdsmi prints its library search to stdout when libamd_smi.so is missing:
            # stdout carries `fleet-agent collect --print`'s JSON, so send that to stderr.
            with contextlib.redirect_stdout(sys.stderr):
                import amdsmi  # noqa: PLC0415 - optional (extra `amd`), AMD nodes only
        except (ImportError, KeyError, OSError) as exc:  # KeyError: libamd_smi.so not found
            return _empty(f"amdsmi not importable: {type(exc).__name__}: {exc}")
    try:
        amdsmi.amdsmi_init(amdsmi.AmdSmiInitFlags.INIT_AMD_GPUS)
    except Exception as exc:  # AmdSmiLibraryException: no amdgpu driver, no /dev/kfd access
        return _empty(f"AMD SMI init failed: {type(exc).__name__}: {exc} "
                      "(no amdgpu driver or GPU?)")
    try:
        return _read_devices(amdsmi)
    except Exception as exc:  # a GPU lost mid-read must not kill the cycle
        return _empty(f"AMD SMI read failed: {type(exc).__name__}: {exc}")
    finally:
        with contextlib.suppress(Exception):
            amdsmi.amdsmi_shut_down()


def _empty(error: str) -> dict[str, Any]:
    """A reading with no GPUs (``fleet_agent.gpus.empty_reading``'s shape, AMD's driver)."""
    return {"driver_version": None, "cuda_driver_version": None, "amd_driver_version": None,
            "gpus": [], "processes": [], "error": error}


def _field(func, *args: Any) -> Any:
    """One AMD SMI getter; None when it fails or answers ``"N/A"`` (per-field tolerance)."""
    try:
        value = func(*args)
    except Exception:
        return None
    return None if value == "N/A" else value


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) \
        else None


def _read_devices(amdsmi: Any) -> dict[str, Any]:
    reading = _empty("")
    reading["error"] = None
    for index, handle in enumerate(amdsmi.amdsmi_get_processor_handles()):
        if index == 0:
            driver = _field(amdsmi.amdsmi_get_gpu_driver_info, handle) or {}
            reading["amd_driver_version"] = _text(driver.get("driver_version"), 64)
        gpu = _read_device(amdsmi, index, handle)
        reading["gpus"].append(gpu)
        for proc in _field(amdsmi.amdsmi_get_gpu_process_list, handle) or []:
            pid = proc.get("pid") if isinstance(proc, dict) else None
            if not isinstance(pid, int) or pid <= 0:
                continue
            vram = (proc.get("memory_usage") or {}).get("vram_mem")
            reading["processes"].append({"gpu_uuid": gpu["uuid"], "pid": pid,
                                         "used_memory_bytes": vram if isinstance(vram, int)
                                         and vram >= 0 else None})
    return reading


def _read_device(amdsmi: Any, index: int, handle: Any) -> dict[str, Any]:
    vram = amdsmi.AmdSmiMemoryType.VRAM
    asic = _field(amdsmi.amdsmi_get_gpu_asic_info, handle) or {}
    activity = _field(amdsmi.amdsmi_get_gpu_activity, handle) or {}
    power = _field(amdsmi.amdsmi_get_power_info, handle) or {}
    ecc = _field(amdsmi.amdsmi_get_gpu_total_ecc_count, handle) or {}
    gfx = _text(asic.get("target_graphics_version"), 64)
    return {
        "index": index,
        "uuid": _text(_field(amdsmi.amdsmi_get_gpu_device_uuid, handle), 128)
        or f"unknown-{index}",
        "name": _text(asic.get("market_name"), 255) or "unknown AMD GPU",
        "vendor": "amd",
        "memory_total_bytes": _int(_field(amdsmi.amdsmi_get_gpu_memory_total, handle, vram)),
        "memory_used_bytes": _int(_field(amdsmi.amdsmi_get_gpu_memory_usage, handle, vram)),
        "compute_capability": None,
        "gfx_arch": gfx if gfx and gfx.startswith("gfx") and gfx != "gfx0" else None,
        "utilization_gpu_pct": _number(activity.get("gfx_activity")),
        "temperature_c": _temperature(amdsmi, handle),
        "power_draw_w": next((_number(power.get(k)) for k in
                              ("socket_power", "current_socket_power", "average_socket_power")
                              if _number(power.get(k))), None),
        "power_limit_w": _power_limit(amdsmi, handle, power),
        "ecc_errors_uncorrected": _int(ecc.get("uncorrectable_count")),
    }


def _temperature(amdsmi: Any, handle: Any) -> float | None:
    kinds, current = amdsmi.AmdSmiTemperatureType, amdsmi.AmdSmiTemperatureMetric.CURRENT
    for sensor in (kinds.HOTSPOT, kinds.EDGE):
        value = _number(_field(amdsmi.amdsmi_get_temp_metric, handle, sensor, current))
        if value is not None and value > 0:
            return value
    return None


def _power_limit(amdsmi: Any, handle: Any, power: dict[str, Any]) -> float | None:
    limit = _number(power.get("power_limit"))
    if limit:
        return limit
    cap = _number((_field(amdsmi.amdsmi_get_power_cap_info, handle) or {}).get("power_cap"))
    return cap / 1e6 if cap else None  # µW


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 \
        else None


def _text(value: Any, limit: int) -> str | None:
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return value.strip()[:limit] or None if isinstance(value, str) else None
