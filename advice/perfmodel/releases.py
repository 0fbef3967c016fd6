"""Predicted performance change between two vLLM releases, only where measured kernel data
has both.

The roofline knows no release (same bytes, same FLOPs), so a change between releases can
only come from kernel data collected on each of them: aiconfigurator's support matrix
(audit.kb.perf.aic) lists, per GPU system and model, the vLLM versions it holds data for.
When both the running and the target release are there, the running command is predicted
on each at the server's observed load; otherwise the answer says which releases the data
has. Shape: ``{"available": bool, "why": str, "current": {...} | None, "target": {...} |
None, "output_tps_change": float | None, "tpot_change": float | None, "summary": str}``
(changes as fractions, +0.10 = 10 % more / longer; ``summary`` the line the planner shows).
"""

from __future__ import annotations

from typing import Any

from audit.kb.perf import aic, rounded
from audit.kb.perf.facts import command_facts, observed_load
from audit.kb.perf.roofline import operating_point


def _none(why: str) -> dict[str, Any]:
    return {"available": False, "why": why, "current": None, "target": None,
            "output_tps_change": None, "tpot_change": None, "summary": why}


def release_change(ctx: dict[str, Any], target: str) -> dict[str, Any]:
    """The running command at its observed load on its release and on ``target``."""
    current = ctx["vllm"].get("version")
    if not aic.available():
        return _none("no kernel data installed (pip install '.[perf]'): the roofline cannot "
                     "tell releases apart")
    facts = command_facts(ctx)
    system = aic.SYSTEMS.get(facts.gpu_label or "")
    versions = aic.versions(facts.model, system) if system else []
    if current not in versions or target not in versions:
        held = ", ".join(versions) or "none"
        return _none(f"kernel data for {facts.model} on {system or facts.gpu_label} holds vLLM "
                     f"{held}: no measured prediction between {current} and {target}")
    load, measured, why = observed_load(ctx)
    if load is None:
        return _none(f"no observed load to predict at: {why}")
    points = {}
    for name, version in (("current", current), ("target", target)):
        cover = {"covered": True, "system": system, "vllm": version}
        try:
            step = aic.step_function(facts, load, cover)
            points[name] = rounded(operating_point(facts, load, step,
                                                   measured.acceptance_length))
        except (ValueError, aic.KernelDataError) as exc:
            return _none(f"no measured prediction at vLLM {version}: {exc}")
    cur, tgt = points["current"], points["target"]
    tps, tpot = tgt["output_tps"] / cur["output_tps"] - 1, tgt["tpot_s"] / cur["tpot_s"] - 1
    why = (f"kernel data for {system} at vLLM {current} and {target} (aiconfigurator-core), "
           "at this server's load")
    return {"available": True, "why": why, "current": cur, "target": tgt,
            "output_tps_change": round(tps, 3), "tpot_change": round(tpot, 3),
            "summary": f"{tps:+.0%} output tokens/s ({cur['output_tps']:.0f} -> "
                       f"{tgt['output_tps']:.0f}), {tpot:+.0%} TPOT; {why}"}
