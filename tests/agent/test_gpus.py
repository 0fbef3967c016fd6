"""GPU readings: NVML field mapping (through an injected NVML stand-in), files, failures."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pynvml
import pytest

from fleet_agent import gpus
from fleet_agent.schema import GpuInfo

FIXTURES = Path(__file__).parent / "fixtures"


class FakeNvml:
    """The subset of the ``pynvml`` API the agent calls, with one unsupported field."""

    NVMLError = pynvml.NVMLError

    def __init__(self, init_error: Exception | None = None):
        self.init_error = init_error
        self.shutdown_called = False

    def nvmlInit(self):  # noqa: N802 - pynvml names
        if self.init_error:
            raise self.init_error

    def nvmlShutdown(self):  # noqa: N802
        self.shutdown_called = True

    def nvmlSystemGetDriverVersion(self):  # noqa: N802
        return "580.95.05"

    def nvmlSystemGetCudaDriverVersion_v2(self):  # noqa: N802
        return 13000

    def nvmlSystemGetCudaDriverVersion(self):  # noqa: N802
        return 13000

    def nvmlDeviceGetCount(self):  # noqa: N802
        return 1

    def nvmlDeviceGetHandleByIndex(self, i):  # noqa: N802
        return f"h{i}"

    def nvmlDeviceGetUUID(self, h):  # noqa: N802
        return "GPU-1111"

    def nvmlDeviceGetName(self, h):  # noqa: N802
        return b"NVIDIA H200"  # old bindings returned bytes

    def nvmlDeviceGetMemoryInfo(self, h):  # noqa: N802
        return SimpleNamespace(total=150_754_820_096, used=140_000_000_000, free=1)

    def nvmlDeviceGetUtilizationRates(self, h):  # noqa: N802
        return SimpleNamespace(gpu=88, memory=40)

    def nvmlDeviceGetCudaComputeCapability(self, h):  # noqa: N802
        return (9, 0)

    def nvmlDeviceGetPowerUsage(self, h):  # noqa: N802
        return 512_345  # milliwatts

    def nvmlDeviceGetEnforcedPowerLimit(self, h):  # noqa: N802
        return 700_000

    def nvmlDeviceGetTemperature(self, h, sensor):  # noqa: N802
        return 55

    def nvmlDeviceGetTotalEccErrors(self, h, kind, counter):  # noqa: N802
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetComputeRunningProcesses(self, h):  # noqa: N802
        return [SimpleNamespace(pid=4242, usedGpuMemory=1 << 30)]


def test_an_nvml_reading_maps_units_and_tolerates_unsupported_fields() -> None:
    nvml = FakeNvml()
    reading = gpus.read_nvml(nvml)
    assert reading["error"] is None and nvml.shutdown_called
    (gpu,) = reading["gpus"]
    GpuInfo.model_validate(gpu)
    assert gpu["name"] == "NVIDIA H200" and gpu["compute_capability"] == "9.0"
    assert gpu["power_draw_w"] == pytest.approx(512.345)
    assert gpu["power_limit_w"] == 700.0
    assert gpu["ecc_errors_uncorrected"] is None
    assert reading["cuda_driver_version"] == "13.0"
    assert reading["processes"] == [{"gpu_uuid": "GPU-1111", "pid": 4242,
                                     "used_memory_bytes": 1 << 30}]


def test_a_missing_driver_is_a_gpu_error_not_a_crash() -> None:
    error = pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    reading = gpus.read_nvml(FakeNvml(init_error=error))
    assert reading["gpus"] == [] and "NVML init failed" in reading["error"]


def test_the_real_library_on_a_gpu_less_machine_reports_why() -> None:
    reading = gpus.read_nvml()
    if reading["gpus"]:  # pragma: no cover - a machine with a driver
        pytest.skip("this machine has NVIDIA GPUs")
    assert reading["error"]


def test_cuda_versions_render_like_nvidia_smi() -> None:
    assert gpus.cuda_version_text(12080) == "12.8"
    assert gpus.cuda_version_text(13000) == "13.0"
    assert gpus.cuda_version_text(None) is None


def test_a_recorded_reading_and_a_whole_printed_report_both_replay(tmp_path) -> None:
    reading = gpus.read_source(str(FIXTURES / "nvml_h100x2.json"))
    assert len(reading["gpus"]) == 2 and len(reading["processes"]) == 2
    report = {"schema_version": 1, "host": {"nvidia_driver_version": "580.95.05",
                                            "cuda_driver_version": "13.0"},
              "gpus": reading["gpus"], "gpu_processes": reading["processes"], "gpu_error": None}
    path = tmp_path / "printed.json"
    path.write_text(json.dumps(report))
    assert gpus.read_source(str(path)) == reading


def test_an_unreadable_recording_is_a_gpu_error(tmp_path) -> None:
    reading = gpus.read_source(str(tmp_path / "missing.json"))
    assert reading["gpus"] == [] and "unreadable" in reading["error"]
