"""Per-host latency targets (SLOs) and the layout that meets them.

Targets come from the host's labels (the agent's ``host.labels``, set by the operator on the
node): ``slo-ttft-ms`` (time to first token) and ``slo-tpot-ms`` (time per output token),
milliseconds, compared with the calibrated median prediction. A label that is not a
positive number is ignored and the answer says so (labels are agent input).

:func:`pick` predicts every tensor-parallel layout of the recommended command on the same
GPUs (TP = 1, 2, 4, 8 dividing the GPU count; the rest of the GPUs as replicas) at the
observed load, keeps those that meet every target and picks the one with the most output
tokens/s. Per-GPU KV bytes per token scale with 1/TP and the KV memory gains the weights TP
no longer holds (the same arithmetic as audit.kb.geometry, moved by TP only).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from audit.kb.perf import aic, calibrate
from audit.kb.perf.facts import CommandFacts, Load
from audit.kb.perf.roofline import operating_point

LABELS = {"ttft_s": ("slo-ttft-ms", "TTFT"), "tpot_s": ("slo-tpot-ms", "TPOT")}


def targets(ctx: dict[str, Any]) -> tuple[dict[str, float], list[str]]:
    """({"ttft_s": s, "tpot_s": s} for the labels set, problems with labels ignored)."""
    labels = (ctx.get("host") or {}).get("labels") or {}
    found, problems = {}, []
    for key, (label, _) in LABELS.items():
        if label not in labels:
            continue
        try:
            value = float(labels[label])
        except (TypeError, ValueError):
            value = math.nan
        if not math.isfinite(value) or value <= 0:
            problems.append(f"label {label}={str(labels[label])[:40]!r} ignored: not a "
                            "positive number of milliseconds")
            continue
        found[key] = value / 1000.0
    return found, problems


def _variant(f: CommandFacts, tp: int, gpus: int) -> CommandFacts:
    scale = f.tp / tp
    held = (f.weight_bytes_total or 0.0) + f.drafter_bytes_total
    memory = (f.kv_memory_bytes or 0.0) + held / f.shards - held / (tp * max(1, f.pp))
    return replace(f, tp=tp, replicas=gpus // (tp * max(1, f.pp)),
                   kv_global_bytes=(f.kv_global_bytes or 0.0) * scale,
                   kv_sliding_bytes=f.kv_sliding_bytes * scale,
                   kv_memory_bytes=memory if memory > 0 else None)


def _layout(f: CommandFacts) -> str:
    return f"{f.replicas} x TP={f.tp}"


def pick(f: CommandFacts, load: Load, goals: dict[str, float], step_for,
         ratios: dict[str, float | None], accept: float | None) -> dict[str, Any]:
    """``{"targets", "layouts": [{layout, tpot_s, ttft_s, output_tps, meets}], "pick",
    "met", "summary"}``; ``step_for(facts)`` gives the step model of a layout, ``ratios``
    the server's calibration (uncalibrated figures when it has none)."""
    gpus = f.shards * f.replicas
    rows = []
    for tp in (1, 2, 4, 8):
        if gpus % (tp * max(1, f.pp)) or (f.heads and f.heads % tp):
            continue
        variant = _variant(f, tp, gpus)
        if not variant.kv_memory_bytes or variant.missing():
            continue
        try:
            point = operating_point(variant, load, step_for(variant), accept)
        except (ValueError, aic.KernelDataError):
            continue
        point = calibrate.scale(point, ratios) or point
        meets = all(point[key] <= goal for key, goal in goals.items())
        rows.append({"layout": _layout(variant), "tpot_s": round(point["tpot_s"], 4),
                     "ttft_s": round(point["ttft_s"], 3),
                     "output_tps": round(point["output_tps"], 1), "meets": meets})
    chosen = max((r for r in rows if r["meets"]), key=lambda r: r["output_tps"], default=None)
    current = next((r for r in rows if r["layout"] == _layout(f)), None)
    met = current["meets"] if current else None
    goal_text = ", ".join(f"{LABELS[k][1]} <= {v * 1000:g} ms" for k, v in goals.items())
    if chosen is None:
        summary = f"SLO ({goal_text}): no layout on these {gpus} GPUs meets it at this load"
    elif met:
        summary = (f"SLO ({goal_text}): the recommended {_layout(f)} meets it"
                   + ("" if chosen["layout"] == _layout(f) else
                      f"; {chosen['layout']} meets it too with {chosen['output_tps']:.0f} "
                      "tok/s"))
    else:
        summary = (f"SLO ({goal_text}): the recommended {_layout(f)} misses it; "
                   f"{chosen['layout']} meets it with {chosen['output_tps']:.0f} tok/s: "
                   "prefer that layout")
    return {"targets": {k: v for k, v in goals.items()}, "layouts": rows,
            "pick": chosen["layout"] if chosen else None, "met": met, "summary": summary}
