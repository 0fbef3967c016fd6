"""One simulated host per case report (:mod:`demo.cases`): the report's GPUs and its server.

GPUs come from the case's ``gpus`` list (device name with its parenthetical note dropped,
memory from ``memory_gib``, compute capability and unified memory from the knowledge base's
GPU table; non-NVIDIA devices keep the same reading shape). Kept apart from
:mod:`demo.cases` because the GPU table is the dashboard's knowledge base (``audit.kb``),
which the agent tests, importing :mod:`demo.cases`, have no use for.
"""

from __future__ import annotations

import re

from audit.kb.gpus import lookup
from demo.cases import Case, load_cases
from demo.specs import GpuSpec, HostSpec

_GIB = 2**30


def _gpus(case: Case) -> tuple[GpuSpec, ...]:
    out = []
    for spec in case.gpus:
        name = re.sub(r"\s*\([^)]*\)\s*$", "", str(spec.get("name") or "unknown")).strip()
        memory = spec.get("memory_gib")
        row = lookup(name) or {}
        for _ in range(int(spec.get("count") or 1)):
            out.append(GpuSpec(name, int(memory * _GIB) if memory else None, row.get("cc"),
                               None, bool(row.get("unified_memory"))))
    return tuple(out)


def case_host(case: Case) -> HostSpec:
    """The host of one case, named ``case<id>-<gpu>``."""
    gpus = _gpus(case)
    name = re.sub(r"[^a-z0-9]+", "-", (gpus[0].name if gpus else "gpu").lower())
    name = name.replace("nvidia-", "").replace("geforce-", "").strip("-")[:20].strip("-")
    return HostSpec(f"case{case.cid}-{name}", gpus, (case.server,), role=f"case {case.name}",
                    labels=(("source", f"case-{case.cid}"),))


def case_hosts() -> list[HostSpec]:
    """Every case that runs a server, sorted by case id."""
    return [case_host(case) for case in load_cases()]
