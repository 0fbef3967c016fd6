"""AMD Instinct GPUs in the knowledge base: the GPU table knows MI250/MI250X,
MI300X, MI325X and MI350X/MI355X, the gpu context carries the gfx target, and the ROCm rules
decide on the architecture, so a GPU the table does not name still gets them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from audit.kb.context import build_contexts
from audit.kb.engine import load_rules
from audit.kb.gpus import describe, gpu_context, lookup

sys.path.insert(0, str(Path(__file__).resolve().parent))
import casekit  # noqa: E402

MORE_CASES = Path(__file__).resolve().parent / "more_cases"


@pytest.fixture(scope="module")
def kb():
    return load_rules()


@pytest.mark.parametrize(("name", "gfx", "memory_gb", "bandwidth", "fp8", "fp4"), [
    ("AMD Instinct MI250X", "gfx90a", 128, 3.2, False, False),
    ("AMD Instinct MI250", "gfx90a", 128, 3.2, False, False),
    ("AMD Instinct MI300X", "gfx942", 192, 5.3, True, False),
    ("AMD Instinct MI325X", "gfx942", 256, 6.0, True, False),
    ("AMD Instinct MI350X", "gfx950", 288, 8.0, True, True),
    ("AMD Instinct MI355X", "gfx950", 288, 8.0, True, True),
])
def test_amd_smi_market_names_resolve_to_their_row(name, gfx, memory_gb, bandwidth, fp8, fp4):
    row = lookup(name)
    assert row is not None, name
    assert (row["vendor"], row["gfx"], row["memory_gb"], row["bandwidth_tbs"], row["fp8"],
            row["fp4"], row["cc"]) == ("amd", gfx, memory_gb, bandwidth, fp8, fp4, None)
    assert row["source"]


def test_the_agents_gfx_target_wins_and_names_an_unknown_amd_gpu():
    known = describe({"name": "AMD Instinct MI300X", "gfx_arch": "gfx942:sramecc+:xnack-",
                      "memory_total_bytes": 205_822_885_888})
    assert (known["gfx_arch"], known["vendor"], known["compute_capability"]) == (
        "gfx942", "amd", None)
    assert known["memory_gib"] == 191.69 and known["bandwidth_tbs"] == 5.3
    unknown = describe({"name": "Instinct next-gen", "gfx_arch": "gfx950"})
    assert (unknown["known"], unknown["vendor"], unknown["gfx_arch"]) == (False, "amd", "gfx950")
    assert describe({"name": "NVIDIA H100 80GB HBM3"})["gfx_arch"] is None
    strix = describe({"name": "AMD Ryzen AI Max (Strix Halo) iGPU gfx1151"})  # case 005's name
    assert (strix["gfx_arch"], strix["vendor"]) == ("gfx1151", "amd")
    ctx = gpu_context([{"uuid": "a", "name": "AMD Instinct MI325X"}], ["a"], 1)
    assert ctx["gfx_arch"] == "gfx942" and ctx["bandwidth_knee_max_num_seqs"] == 128


def _fired(kb, report):
    return {f.rule_id for ctx in build_contexts(report, []) for f in kb.evaluate(ctx)}


def test_the_rocm_aiter_rule_follows_the_architecture_not_the_name(kb):
    path = next(MORE_CASES.glob("227-*.json"))  # MI325X, ROCm image without AITER
    report = casekit.case_to_report(path)
    assert report["gpus"][0]["gfx_arch"] == "gfx942"
    assert "upx-rocm-cdna-aiter-off" in _fired(kb, report)
    for gpu in report["gpus"]:  # a CDNA4 part the table does not name, read by AMD SMI
        gpu.update(name="AMD Instinct MI3xx OAM", gfx_arch="gfx950", vendor="amd")
    assert "upx-rocm-cdna-aiter-off" in _fired(kb, report)
    for gpu in report["gpus"]:  # near miss: CDNA2 has no AITER kernels
        gpu.update(name="AMD Instinct MI250X", gfx_arch="gfx90a")
    assert "upx-rocm-cdna-aiter-off" not in _fired(kb, report)


def test_fp8_kv_cache_on_an_mi250_is_flagged_from_the_table(kb):
    path = next(MORE_CASES.glob("227-*.json"))
    report = casekit.case_to_report(path)
    argv = report["servers"][0]["argv"]
    report["servers"][0]["argv"] = [*argv, "--kv-cache-dtype", "fp8"]
    for gpu in report["gpus"]:
        gpu.update(name="AMD Instinct MI250X", gfx_arch="gfx90a", vendor="amd")
    assert "up-fp8-kv-pre-ada" in _fired(kb, report)
    for gpu in report["gpus"]:  # MI300X has FP8: silent
        gpu.update(name="AMD Instinct MI300X", gfx_arch="gfx942")
    assert "up-fp8-kv-pre-ada" not in _fired(kb, report)
