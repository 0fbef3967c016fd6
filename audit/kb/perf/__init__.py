"""Performance model of one vLLM command: predicted TTFT, TPOT and output tokens/s at the
server's observed load, and how far the server's own metrics are from it.

Pure library (no Django). The step model is aiconfigurator's measured kernel data where it
covers the GPU, model and quantization (:mod:`audit.kb.perf.aic`, optional extra ``.[perf]``)
and the roofline elsewhere (:mod:`audit.kb.perf.roofline`); :mod:`audit.kb.perf.calibrate`
compares with the measurement. Two consumers, one computation:

- the rule context's ``perf`` block (:func:`perf_block`, read by
  audit/rules/performance_model.yaml: a server far slower than its prediction is a finding);
- the recommender's prediction for the current and the recommended command
  (advice.perfmodel.predict_commands), which calibrates with the same ratios.
"""

from __future__ import annotations

import logging
from typing import Any

from audit.kb.perf import aic, calibrate
from audit.kb.perf.facts import CommandFacts, Load, command_facts, observed_load
from audit.kb.perf.roofline import (
    TP_OVERHEAD,
    TP_OVERHEAD_SOURCE,
    operating_point,
    roofline_step,
)


def model_for(f: CommandFacts, load: Load, kernel: bool = True
              ) -> tuple[Any, str, dict[str, Any]]:
    """(step function, source text, coverage) for one command at one load; ``kernel``
    False forces the roofline (two commands compared on one model)."""
    cover = aic.coverage(f)
    if not kernel and cover["covered"]:
        cover = {**cover, "covered": False,
                 "why": "roofline for both commands: kernel data covers only one of them"}
    if cover["covered"]:
        try:
            return aic.step_function(f, load, cover), cover["why"], cover
        except aic.KernelDataError as exc:
            cover = _failed(cover, exc)
    peak = f"; compute peak {f.peak_source}" if f.peak_source else \
        "; no compute peak for this GPU: bandwidth bound only"
    comm = f"; TP communication +{TP_OVERHEAD:.0%} per TP doubling ({TP_OVERHEAD_SOURCE})" \
        if f.tp > 1 else ""
    return roofline_step, (f"roofline: {f.gpu_label} {f.bandwidth_tbs} TB/s HBM (gpus.yaml)"
                           f"{peak}{comm}"), cover


def _failed(cover: dict[str, Any], exc: Exception) -> dict[str, Any]:
    return {**cover, "covered": False,
            "why": f"aiconfigurator failed on this command ({exc}): roofline instead"}


def rounded(point: dict[str, Any]) -> dict[str, Any]:
    """A prediction with seconds and tokens/s rounded for display and JSON."""
    out = dict(point)
    for key, digits in (("tpot_s", 4), ("ttft_s", 3), ("output_tps", 1)):
        out[key] = round(point[key], digits)
    return out


def predict(f: CommandFacts, load: Load, acceptance: float | None,
            kernel: bool = True) -> dict[str, Any]:
    """``{"predicted", "calibrated": None, "source", "coverage", "kernel"}`` for one command
    (``kernel`` as :func:`model_for`). Raises ValueError when one request of the load does
    not fit its KV memory."""
    step, source, cover = model_for(f, load, kernel)
    try:
        point = operating_point(f, load, step, acceptance)
    except aic.KernelDataError as exc:  # a step shape the kernel tables lack
        step, source, _ = model_for(f, load, kernel=False)
        cover = _failed(cover, exc)
        point = operating_point(f, load, step, acceptance)
    return {"predicted": rounded(point), "calibrated": None, "source": source,
            "coverage": {"kernel_data": cover["covered"], "why": cover["why"],
                         "model": f.model, "gpu": f.gpu_label, "vllm": f.version,
                         "tp": f.tp, "replicas": f.replicas}, "kernel": cover["covered"]}


def _verdict(verdict: dict[str, Any], ratio: float | None) -> str | None:
    if verdict["trusted"] is None:
        return None
    if verdict["trusted"]:
        return "agrees"
    return "faster" if ratio is not None and ratio < verdict["band"][0] else "slower"


log = logging.getLogger(__name__)
_EMPTY: dict[str, Any] = {
    "available": False, "reason": None, "source": None, "ratio": None, "ratio_ttft": None,
    "trusted": None, "verdict": None, "band": None, "why": None, "predicted_tpot_s": None,
    "measured_tpot_s": None, "predicted_ttft_s": None, "measured_ttft_s": None}


def perf_block(ctx: dict[str, Any]) -> dict[str, Any]:
    """The rule context's ``perf`` block (:func:`_perf_block`); a context is built from agent
    input and never raises, so a failure of the model is logged and named in ``reason``."""
    try:
        return _perf_block(ctx)
    except Exception as exc:  # noqa: BLE001 - logged; the rest of the context stands
        log.exception("performance model failed for server %s", ctx.get("server", {}).get("key"))
        return {**_EMPTY, "reason": f"the performance model failed ({type(exc).__name__})"}


def _perf_block(ctx: dict[str, Any]) -> dict[str, Any]:
    """The rule context's ``perf`` block for the running command.

    ``{"available": bool, "reason": str | None, "source", "ratio", "ratio_ttft",
    "trusted": bool | None, "verdict": "agrees" | "slower" | "faster" | None, "band":
    [lo, hi], "why", "predicted_tpot_s", "measured_tpot_s", "predicted_ttft_s",
    "measured_ttft_s"}``; ``ratio`` = measured / predicted (TPOT, else throughput), > 1 when
    the server is slower than the model. Only computed when the server measured a latency:
    without one there is nothing to compare.
    """
    out = dict(_EMPTY)
    load, measured, why = observed_load(ctx)
    if load is None:
        return {**out, "reason": why}
    if not (measured.tpot_s or measured.ttft_s or measured.output_tps):
        return {**out, "reason": "the server measured no TPOT, TTFT or throughput"}
    facts = command_facts(ctx)
    if facts.missing():
        return {**out, "reason": "the knowledge base lacks " + ", ".join(facts.missing())}
    try:
        current = predict(facts, load, measured.acceptance_length)
    except ValueError as exc:
        return {**out, "reason": str(exc)}
    r = calibrate.ratios(current["predicted"], measured)
    verdict = calibrate.judge(r, current["kernel"])
    ratio = calibrate.headline(r)
    return {**out, "available": True, "source": current["source"],
            "ratio": round(ratio, 3) if ratio else None,
            "ratio_ttft": round(r["ttft"], 3) if r["ttft"] else None,
            "trusted": verdict["trusted"], "verdict": _verdict(verdict, ratio),
            "band": verdict["band"], "why": verdict["why"],
            "predicted_tpot_s": current["predicted"]["tpot_s"], "measured_tpot_s": measured.tpot_s,
            "predicted_ttft_s": current["predicted"]["ttft_s"], "measured_ttft_s": measured.ttft_s}


__all__ = ["CommandFacts", "Load", "command_facts", "model_for", "observed_load", "perf_block",
           "predict", "rounded"]
