"""audit.kb.gpus: NVML names -> GPU facts, unknown GPUs, per-server GPUs, bandwidth knee."""

from __future__ import annotations

import pytest

from audit.kb.gpus import bandwidth_knee, describe, gpu_context, lookup


@pytest.mark.parametrize(("name", "label", "cc", "bandwidth"), [
    ("NVIDIA H100 80GB HBM3", "H100 SXM5 80GB HBM3", "9.0", 3.35),
    ("NVIDIA H100 PCIe", "H100 PCIe", "9.0", 2.0),
    ("NVIDIA H100 NVL", "H100 NVL", "9.0", 3.9),
    ("NVIDIA H200", "H200 / H200 NVL", "9.0", 4.8),
    ("NVIDIA H200 NVL", "H200 / H200 NVL", "9.0", 4.8),
    ("NVIDIA GH200 480GB", "GH200", "9.0", 4.0),
    ("NVIDIA B200", "B200", "10.0", 8.0),
    ("NVIDIA GB200", "GB200 (per GPU)", "10.0", 8.0),
    ("NVIDIA GB10", "GB10 (DGX Spark)", "12.1", 0.273),
    ("NVIDIA A100-SXM4-40GB", "A100 40GB SXM4", "8.0", 1.555),
    ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM4", "8.0", 2.039),
    ("NVIDIA A100-PCIE-40GB", "A100 40GB PCIe", "8.0", 1.555),
    ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe", "8.0", 1.935),
    ("NVIDIA L40S", "L40S", "8.9", 0.864),
    ("NVIDIA L4", "L4", "8.9", 0.3),
    ("NVIDIA A10G", "A10G", "8.6", 0.6),
    ("NVIDIA A10", "A10", "8.6", 0.6),
    ("NVIDIA GeForce RTX 4090", "GeForce RTX 4090", "8.9", 1.008),
    ("NVIDIA GeForce RTX 5090", "GeForce RTX 5090", "12.0", 1.79),
    ("NVIDIA GeForce RTX 4060 Ti", "GeForce RTX 4060 Ti 16GB", "8.9", 0.288),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "RTX PRO 6000 Blackwell", "12.0", 1.792),
    ("Tesla V100-SXM2-16GB", "Tesla V100 16GB", "7.0", 0.9),
    ("Tesla V100-PCIE-32GB", "Tesla V100 32GB", "7.0", 0.9),
    ("Tesla T4", "Tesla T4", "7.5", 0.32),
])
def test_nvml_names_resolve_to_the_right_row(name, label, cc, bandwidth) -> None:
    row = lookup(name)
    assert row is not None, name
    assert (row["label"], row["cc"], row["bandwidth_tbs"]) == (label, cc, bandwidth)
    assert row["source"]


def test_fp8_and_fp4_capabilities_follow_the_architecture() -> None:
    assert lookup("NVIDIA A100-SXM4-80GB")["fp8"] is False
    assert lookup("NVIDIA L40S")["fp8"] is True and lookup("NVIDIA L40S")["fp4"] is False
    assert lookup("NVIDIA B200")["fp4"] is True
    assert lookup("NVIDIA GB10")["unified_memory"] is True


def test_an_unknown_gpu_keeps_what_nvml_reported() -> None:
    facts = describe({"name": "NVIDIA GeForce RTX 5070 Ti", "memory_total_bytes": 16 * 2**30,
                      "compute_capability": "12.0"})
    assert facts["known"] is False
    assert facts["memory_gib"] == 16.0 and facts["cc"] == 12.0
    assert facts["bandwidth_knee_max_num_seqs"] is None
    assert facts["vendor"] == "nvidia"


def test_a_non_nvidia_accelerator_is_not_given_cuda_facts() -> None:
    facts = describe({"name": "Huawei Ascend 910B3 (Atlas 800T A2)", "memory_gib": 64})
    assert facts["known"] and facts["vendor"] == "huawei"
    assert facts["cc"] is None and facts["arch"] == "ascend"


@pytest.mark.parametrize(("bandwidth", "knee"), [
    (3.35, 64), (4.8, 128), (2.0, 32), (8.0, 128), (1.79, 32), (0.273, 4), (None, None)])
def test_the_bandwidth_knee_scales_from_the_seed_anchors(bandwidth, knee) -> None:
    assert bandwidth_knee(bandwidth) == knee


def _gpu(i: int, name: str = "NVIDIA H100 80GB HBM3", gib: float = 79.65) -> dict:
    return {"index": i, "uuid": f"GPU-{i}", "name": name, "memory_total_bytes": int(gib * 2**30),
            "compute_capability": "9.0"}


def test_a_server_sees_only_the_gpus_it_holds() -> None:
    gpus = [_gpu(0), _gpu(1), _gpu(2, "NVIDIA L40S", 44.4)]
    ctx = gpu_context(gpus, ["GPU-2"], 1)
    assert ctx["name"] == "NVIDIA L40S" and ctx["per_server_count"] == 1 and ctx["count"] == 3
    both = gpu_context(gpus, ["GPU-0", "GPU-1"], 2)
    assert both["per_server_count"] == 2 and both["bandwidth_knee_server"] == 128
    assert both["heterogeneous"] is False


def test_without_uuids_the_world_size_decides_how_many_gpus_a_server_holds() -> None:
    ctx = gpu_context([_gpu(0), _gpu(1), _gpu(2), _gpu(3)], None, 2)
    assert ctx["per_server_count"] == 2


def test_mixed_gpus_are_flagged_heterogeneous_with_the_smallest_memory() -> None:
    gpus = [_gpu(0, "NVIDIA GeForce RTX 5070 Ti", 16), _gpu(1, "NVIDIA GeForce RTX 5090", 32)]
    ctx = gpu_context(gpus, None, 2)
    assert ctx["heterogeneous"] is True and ctx["min_memory_gib"] == 16.0


def test_a_host_without_gpus_still_gives_every_key() -> None:
    ctx = gpu_context([], None, 1)
    assert ctx["count"] == 0 and ctx["known"] is False and ctx["cc"] is None
    assert "bandwidth_knee_max_num_seqs" in ctx and "unified_memory" in ctx
