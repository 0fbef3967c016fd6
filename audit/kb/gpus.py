"""GPU facts for one server: which GPUs it holds and what they can do.

The table (``data/gpus.yaml``) is keyed by NVML device-name patterns and loaded once at import.
A GPU not in the table is still described from what NVML gave (memory, compute capability)
with ``known`` False.

Bandwidth knee (seed 000 "Three load-bearing facts" #2): decode throughput plateaus at batch
~64 on an H100 SXM (3.35 TB/s) and ~128 on an H200 (4.8 TB/s). We scale linearly by bandwidth
from the H100 anchor and round to the nearest power of two in log2 space:
``knee = 2 ** round(log2(64 * bw / 3.35))``. H100 SXM: 64 -> 64; H200: 91.7 -> 128 (the
seed's measured value, which plain linear scaling would miss); H100 PCIe 2.0 TB/s: 38.2 -> 32;
B200 8 TB/s: 152.8 -> 128; RTX 5090 1.79 TB/s: 34.2 -> 32. Power-of-two rounding matches the
batch sizes the seed measured (32/64/128/256). None when bandwidth is unknown.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from audit.kb.paths import load_data, safe_load_yaml

_H100_SXM_TBS = 3.35  # seed 000 Three facts #2
_H100_SXM_KNEE = 64   # seed 000 Three facts #2
_GIB = 2**30
#: A gfx target written in a GPU name (``gfx90a``, ``gfx942``, ``gfx1151``).
_GFX_IN_NAME = re.compile(r"\bgfx[0-9]{2,4}[0-9a-f]?\b", re.IGNORECASE)


def _parse(path: Path) -> list[tuple[re.Pattern[str], dict[str, Any]]]:
    rows = safe_load_yaml(path.read_text(encoding="utf-8"))["gpus"]
    return [(re.compile(row["pattern"], re.IGNORECASE), row) for row in rows]


def _table() -> list[tuple[re.Pattern[str], dict[str, Any]]]:
    """The active KB's ``gpus.yaml`` (follows an installed bundle, see audit.kb.paths)."""
    return load_data("gpus.yaml", _parse)


def lookup(name: str | None) -> dict[str, Any] | None:
    """Table row for an NVML device name (e.g. ``NVIDIA H100 80GB HBM3``), or None."""
    if not name:
        return None
    for pattern, row in _table():
        if pattern.search(name):
            return row
    return None


def bandwidth_knee(bandwidth_tbs: float | None) -> int | None:
    """max_num_seqs past which decode is bandwidth-bound, per GPU (see module docstring)."""
    if not bandwidth_tbs or bandwidth_tbs <= 0:
        return None
    scaled = _H100_SXM_KNEE * bandwidth_tbs / _H100_SXM_TBS
    return int(2 ** max(0, round(math.log2(scaled))))


def _cc_float(cc: str | None) -> float | None:
    try:
        return float(cc) if cc else None
    except ValueError:
        return None


def _memory_gib(gpu: dict[str, Any], row: dict[str, Any] | None) -> float | None:
    """NVML total memory in GiB when reported, else the table's datasheet figure."""
    total = gpu.get("memory_total_bytes")
    if isinstance(total, (int, float)) and total > 0:
        return round(total / _GIB, 2)
    if gpu.get("memory_gib") is not None:
        return float(gpu["memory_gib"])
    return float(row["memory_gb"]) if row and row.get("memory_gb") is not None else None


def _vendor(row: dict[str, Any] | None, name: str | None) -> str | None:
    """Table vendor (default nvidia) for known rows, else guessed from the NVML name."""
    if row is not None:
        return row.get("vendor", "nvidia")
    lowered = (name or "").lower()
    for vendor in ("nvidia", "amd", "huawei", "intel"):
        if vendor in lowered:
            return vendor
    return "amd" if "radeon" in lowered or "instinct" in lowered else None


def _gfx_arch(gpu: dict[str, Any], row: dict[str, Any] | None) -> str | None:
    """AMD's LLVM target (``gfx942``): what the agent read through amd-smi
    (``target_graphics_version``, wire ``gfx_arch``, feature suffixes such as
    ``:sramecc+`` dropped), else the table's ``gfx``, else one written in the GPU's name;
    None for other vendors."""
    reported = gpu.get("gfx_arch")
    if isinstance(reported, str) and reported.startswith("gfx"):
        return reported.split(":", 1)[0].lower()
    if (row or {}).get("gfx"):
        return row["gfx"]
    named = _GFX_IN_NAME.search(str(gpu.get("name") or ""))  # "... iGPU gfx1151" in a report
    return named.group(0).lower() if named else None


def describe(gpu: dict[str, Any]) -> dict[str, Any]:
    """Facts for one report GPU dict (contract fields ``name``, ``memory_total_bytes``,
    ``compute_capability``, ``gfx_arch``); table values win for CC/arch, the agent's reading
    for memory and the gfx target."""
    row = lookup(gpu.get("name"))
    cc = (row or {}).get("cc") or gpu.get("compute_capability")
    bandwidth = (row or {}).get("bandwidth_tbs")
    return {
        "name": gpu.get("name"), "known": row is not None,
        "label": (row or {}).get("label"),
        "vendor": _vendor(row, gpu.get("name")) or ("amd" if _gfx_arch(gpu, row) else None),
        "memory_gib": _memory_gib(gpu, row), "bandwidth_tbs": bandwidth,
        "compute_capability": str(cc) if cc else None, "cc": _cc_float(cc),
        "gfx_arch": _gfx_arch(gpu, row),
        "arch": (row or {}).get("arch"), "fp8": (row or {}).get("fp8"),
        "fp4": (row or {}).get("fp4"), "unified_memory": (row or {}).get("unified_memory"),
        "bandwidth_knee_max_num_seqs": bandwidth_knee(bandwidth),
        "source": (row or {}).get("source"),
    }


def server_gpus(report_gpus: list[dict], gpu_uuids: list[str] | None,
                world_size: int) -> list[dict]:
    """The GPUs a server holds: those whose uuid is in ``gpu_uuids``; else, when the agent
    could not attribute them, the first ``world_size`` (TP x PP) host GPUs, or all of them."""
    wanted = set(gpu_uuids or [])
    if wanted:
        held = [g for g in report_gpus if g.get("uuid") in wanted]
        if held:
            return held
    if world_size and len(report_gpus) > world_size:
        return report_gpus[:world_size]
    return list(report_gpus)


_EMPTY = {
    "count": 0, "name": None, "known": False, "label": None, "vendor": None,
    "memory_gib": None, "bandwidth_tbs": None, "compute_capability": None, "cc": None,
    "gfx_arch": None, "arch": None, "fp8": None, "fp4": None, "unified_memory": None,
    "bandwidth_knee_max_num_seqs": None, "source": None,
}


def gpu_context(report_gpus: list[dict], gpu_uuids: list[str] | None,
                world_size: int) -> dict[str, Any]:
    """The ``gpu`` block of a rule context.

    Describes the server's first GPU (vLLM's batch defaults also read device 0) and adds:
    ``count`` (host GPUs), ``per_server_count``, ``names`` (distinct), ``heterogeneous``
    (mixed models or memory sizes), ``min_memory_gib``, ``total_memory_gib`` (server's GPUs),
    ``bandwidth_knee_server`` (per-GPU knee x GPUs in the server: seed 000 PUSH puts the TP=2
    H100 knee at ~128). Every key is present; values None when unknown.
    """
    held = server_gpus(report_gpus, gpu_uuids, world_size)
    if not held:
        out = dict(_EMPTY, count=len(report_gpus), per_server_count=0, names=[],
                   heterogeneous=False, min_memory_gib=None, total_memory_gib=None,
                   bandwidth_knee_server=None)
        return out
    facts = [describe(g) for g in held]
    out = dict(facts[0])
    memories = [f["memory_gib"] for f in facts if f["memory_gib"] is not None]
    knee = out["bandwidth_knee_max_num_seqs"]
    out.update(
        count=len(report_gpus), per_server_count=len(held),
        names=sorted({str(f["name"]) for f in facts}),
        heterogeneous=len({f["name"] for f in facts}) > 1 or len(set(memories)) > 1,
        min_memory_gib=min(memories) if memories else None,
        total_memory_gib=round(sum(memories), 2) if memories else None,
        bandwidth_knee_server=knee * len(held) if knee else None,
    )
    return out
