"""Contract reports for the recommendation and planner tests.

``host_report(gpu, count, argv, version, …)`` builds one host running one vLLM server; the
GPU memory comes from the datasheet figure of audit/kb/data/gpus.yaml (or ``memory_gib``).
``prompt_metrics(prompt_lengths, running)`` writes the /metrics text a V1 server would serve
with those prompt lengths in its ``vllm:request_prompt_tokens`` histogram.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from audit.kb.gpus import lookup
from fleet_agent.schema import parse_report

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "audit"))
from casekit import report_skeleton, seed_template, server_entry  # noqa: E402

_GIB = 2**30
_BUCKETS = (128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144)
AWQ_31B = "cyankiwi/gemma-4-31B-it-AWQ-4bit"
EAGLE3 = ('{"method":"eagle3","model":"RedHatAI/gemma-4-31B-it-speculator.eagle3",'
          '"num_speculative_tokens":3}')


def gpus(name: str, count: int, memory_gib: float | None = None) -> list[dict[str, Any]]:
    """``count`` NVML entries for GPU ``name`` (memory: given, else the table's figure)."""
    row = lookup(name) or {}
    memory = memory_gib if memory_gib is not None else row.get("memory_gb")
    return [{"index": i, "uuid": f"GPU-{i}-{name.split()[-1]}", "name": name,
             "memory_total_bytes": int(memory * _GIB) if memory else None,
             "memory_used_bytes": None, "compute_capability": row.get("cc"),
             "utilization_gpu_pct": None, "temperature_c": None, "power_draw_w": None,
             "power_limit_w": None} for i in range(count)]


def prompt_metrics(prompt_lengths: list[int], running: int, model: str = "m") -> str:
    """V1 /metrics text: prompt-length histogram of ``prompt_lengths``, running gauge."""
    base = f'model_name="{model}",engine="0"'
    lines = ["# TYPE vllm:request_prompt_tokens histogram"]
    for bound in _BUCKETS:
        count = sum(1 for n in prompt_lengths if n <= bound)
        lines.append(f'vllm:request_prompt_tokens_bucket{{{base},le="{float(bound)}"}} {count}')
    lines.append(f'vllm:request_prompt_tokens_bucket{{{base},le="+Inf"}} {len(prompt_lengths)}')
    lines.append(f"vllm:request_prompt_tokens_sum{{{base}}} {float(sum(prompt_lengths))}")
    lines.append(f"vllm:request_prompt_tokens_count{{{base}}} {len(prompt_lengths)}")
    lines.append(f"vllm:num_requests_running{{{base}}} {running}")
    lines.append(f"vllm:num_requests_waiting{{{base}}} 0")
    lines.append(f"vllm:kv_cache_usage_perc{{{base}}} 0.3")
    return "\n".join(lines) + "\n"


def host_report(gpu: str, count: int, argv: list[str], version: str = "0.25.1", *,
                memory_gib: float | None = None, template: str | None = "vetted",
                metrics: str | None = None, installed: str | None = None) -> dict[str, Any]:
    """One host, ``count`` x ``gpu``, one server holding every GPU; validated against the
    contract (fleet_agent.schema.parse_report) before it is returned."""
    report = report_skeleton(f"host-{gpu.split()[-1].lower()}-{count}",
                             gpus(gpu, count, memory_gib))
    entry = server_entry(argv, version, gpu_uuids=[g["uuid"] for g in report["gpus"]],
                         template=seed_template(template) if template else None,
                         metrics=metrics)
    if installed:
        entry["installed_vllm_version"] = installed
    report["servers"].append(entry)
    parse_report(report)
    return report


def serve(model: str, *flags: str) -> list[str]:
    """``vllm serve MODEL FLAGS``."""
    return ["vllm", "serve", model, *flags]
