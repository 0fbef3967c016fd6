"""AMD GPUs through AMD SMI where NVML is absent. AMD SMI talks to the amdgpu
driver: a fake ``amdsmi`` module with the real call names, units and "N/A" markers stands in
for it (``fleet_agent/gpus_amd.py`` lists them)."""

from __future__ import annotations

import sys
import types
from enum import IntEnum

import pytest
from fa_fakenode import FakeNode

from fleet_agent import gpus, gpus_amd
from fleet_agent.schema import ReportError, parse_report

GIB = 2**30
MI300X = {"uuid": "9cff73b4-0000-1000-80f2-a1b2c3d4e5f6", "market_name": "AMD Instinct MI300X",
          "gfx": "gfx942", "total": 192 * GIB, "used": 150 * GIB, "gfx_activity": 87,
          "hotspot": 71, "edge": "N/A", "socket_power": 612, "power_limit": 750,
          "uncorrectable": 0, "procs": [{"pid": 5001, "vram": 140 * GIB}]}


def fake_amdsmi(devices: list[dict], init_error: Exception | None = None) -> types.ModuleType:
    """A module with AMD SMI's function names and return shapes over ``devices``."""
    mod = types.ModuleType("amdsmi")

    class InitFlags(IntEnum):
        INIT_AMD_GPUS = 2

    class MemoryType(IntEnum):
        VRAM = 0

    class TempType(IntEnum):
        EDGE = 0
        HOTSPOT = 1

    class TempMetric(IntEnum):
        CURRENT = 0

    mod.AmdSmiInitFlags, mod.AmdSmiMemoryType = InitFlags, MemoryType
    mod.AmdSmiTemperatureType, mod.AmdSmiTemperatureMetric = TempType, TempMetric
    mod.calls = []

    def init(flag):
        mod.calls.append("init")
        if init_error:
            raise init_error

    def fail_if_missing(dev, key):
        if key not in dev:
            raise RuntimeError(f"AMDSMI_STATUS_NOT_SUPPORTED {key}")
        return dev[key]

    mod.amdsmi_init = init
    mod.amdsmi_shut_down = lambda: mod.calls.append("shutdown")
    mod.amdsmi_get_processor_handles = lambda: list(devices)
    mod.amdsmi_get_gpu_driver_info = lambda d: {"driver_name": "amdgpu",
                                                "driver_version": "6.10.5", "driver_date": ""}
    mod.amdsmi_get_gpu_device_uuid = lambda d: d["uuid"]
    mod.amdsmi_get_gpu_asic_info = lambda d: {"market_name": d["market_name"],
                                              "target_graphics_version": d["gfx"]}
    mod.amdsmi_get_gpu_memory_total = lambda d, kind: fail_if_missing(d, "total")
    mod.amdsmi_get_gpu_memory_usage = lambda d, kind: fail_if_missing(d, "used")
    mod.amdsmi_get_gpu_activity = lambda d: {"gfx_activity": d["gfx_activity"],
                                             "umc_activity": "N/A", "mm_activity": "N/A"}
    mod.amdsmi_get_temp_metric = lambda d, sensor, metric: (
        d["hotspot"] if sensor == TempType.HOTSPOT else d["edge"])
    mod.amdsmi_get_power_info = lambda d: {"socket_power": d["socket_power"],
                                           "current_socket_power": "N/A",
                                           "average_socket_power": "N/A",
                                           "power_limit": d["power_limit"]}
    mod.amdsmi_get_power_cap_info = lambda d: {"power_cap": 750_000_000}
    mod.amdsmi_get_gpu_total_ecc_count = lambda d: {"uncorrectable_count": d["uncorrectable"],
                                                    "correctable_count": 0}
    mod.amdsmi_get_gpu_process_list = lambda d: [
        {"name": "python3", "pid": p["pid"], "mem": 0,
         "memory_usage": {"gtt_mem": 0, "cpu_mem": 0, "vram_mem": p["vram"]}}
        for p in d["procs"]]
    return mod


def no_nvml() -> types.ModuleType:
    mod = types.ModuleType("pynvml")

    def init():
        raise OSError("NVMLError_LibraryNotFound: NVML Shared Library Not Found")

    mod.nvmlInit = init
    return mod


def test_an_mi300x_reads_like_an_nvidia_gpu_with_its_gfx_target() -> None:
    second = {**MI300X, "uuid": "9cff73b4-0000-1000-80f2-000000000002", "procs": [],
              "power_limit": "N/A", "socket_power": "N/A", "hotspot": "N/A", "edge": 45}
    del second["used"]  # unsupported on this board
    amd = fake_amdsmi([MI300X, second])
    reading = gpus_amd.read_amdsmi(amd)
    assert reading["error"] is None and reading["amd_driver_version"] == "6.10.5"
    first, other = reading["gpus"]
    assert first == {"index": 0, "uuid": MI300X["uuid"], "name": "AMD Instinct MI300X",
                     "vendor": "amd", "memory_total_bytes": 192 * GIB,
                     "memory_used_bytes": 150 * GIB, "compute_capability": None,
                     "gfx_arch": "gfx942", "utilization_gpu_pct": 87.0, "temperature_c": 71.0,
                     "power_draw_w": 612.0, "power_limit_w": 750.0,
                     "ecc_errors_uncorrected": 0}
    # "N/A" and unsupported values are None, never 65535 or a crash; the µW cap is converted
    assert other["memory_used_bytes"] is None and other["power_draw_w"] is None
    assert other["power_limit_w"] == 750.0 and other["temperature_c"] == 45.0
    assert reading["processes"] == [{"gpu_uuid": MI300X["uuid"], "pid": 5001,
                                     "used_memory_bytes": 140 * GIB}]
    assert amd.calls == ["init", "shutdown"]


def test_no_driver_is_a_reason_not_a_crash() -> None:
    amd = fake_amdsmi([], init_error=RuntimeError("AMDSMI_STATUS_INIT_ERROR"))
    reading = gpus_amd.read_amdsmi(amd)
    assert reading["gpus"] == [] and "AMD SMI init failed" in reading["error"]


def test_nvml_first_then_amd_smi_and_both_reasons_when_neither_works() -> None:
    reading = gpus.read_nvml_or_amd(no_nvml(), fake_amdsmi([MI300X]))
    assert [g["gfx_arch"] for g in reading["gpus"]] == ["gfx942"]
    none = gpus.read_nvml_or_amd(no_nvml(), fake_amdsmi([]))
    assert none["gpus"] == []
    assert "NVML init failed" in none["error"] and "AMD SMI found no GPU" in none["error"]


def test_an_amd_node_report_carries_its_gpus_and_the_vllm_process_owns_them(
        node: FakeNode, run_collect, monkeypatch: pytest.MonkeyPatch) -> None:
    pids = node.add_vllm(["vllm", "serve", "Qwen/Qwen3-235B-A22B-FP8", "--tensor-parallel-size",
                          "1"], tp=1)
    device = {**MI300X, "procs": [{"pid": pids.workers[0] if pids.workers else pids.engine,
                                   "vram": 140 * GIB}]}
    monkeypatch.setitem(sys.modules, "pynvml", no_nvml())
    monkeypatch.setitem(sys.modules, "amdsmi", fake_amdsmi([device]))
    report = run_collect(node, gpu_source="nvml", probe_http=False)
    (gpu,) = report.gpus
    assert (gpu.name, gpu.gfx_arch, gpu.vendor, gpu.compute_capability) == (
        "AMD Instinct MI300X", "gfx942", "amd", None)
    assert report.host.amd_driver_version == "6.10.5" and report.gpu_error is None
    (server,) = report.servers
    assert server.gpu_uuids == [MI300X["uuid"]]


@pytest.mark.parametrize("value", ["gfx942; reboot", "sm_90", "gfx" + "9" * 80])
def test_the_contract_refuses_a_malformed_gfx_target(value: str) -> None:
    report = {"schema_version": 1, "report_id": "6f1c1f2e-8a43-4c55-9a61-2c0e6b0d6c11",
              "collected_at": "2026-12-01T07:00:00Z", "agent": {"version": "x", "interval_s": 30},
              "host": {"hostname": "n", "machine_id": "m"},
              "gpus": [{"index": 0, "uuid": "u", "name": "AMD Instinct MI300X",
                        "gfx_arch": value}]}
    with pytest.raises(ReportError) as err:
        parse_report(report)
    assert err.value.details[0]["path"] == "gpus[0].gfx_arch"
    report["gpus"][0]["gfx_arch"] = "gfx942:sramecc+:xnack-"
    assert parse_report(report).gpus[0].gfx_arch == "gfx942:sramecc+:xnack-"
