"""Predicted effect of a recommended command: TTFT, TPOT and output tokens/s at the server's
own load, for the current and the recommended command, calibrated by the server's metrics.

Entry point: :func:`predict_commands` (current context, recommended context, replicas) ->
a JSON-able dict; the recommender calls it once per server (advice.recommend.output).
The step model is aiconfigurator's measured kernel data where it covers the GPU, model and
quantization (audit.kb.perf.aic, optional extra ``.[perf]``), else the roofline
(audit.kb.perf.roofline). Shape::

    {"status": "ok" | "none", "reason": str | None,
     "load": {"concurrency", "prompt_tokens", "output_tokens", "source"},
     "measured": {"tpot_s", "ttft_s", "output_tps"},
     "current" / "recommended": {"predicted": {"tpot_s", "ttft_s", "output_tps", "running",
                                 "limited_by", "acceptance_length", "acceptance_source"},
                                 "calibrated": {...} | None, "source", "coverage"},
     "calibration": {"ratios": {"tpot", "ttft", "output_tps"}, "ratio", "trusted", "band",
                     "why"},
     "buys": str, "curve": {"concurrency": [...], "current"/"recommended":
                            {"output_tps": [...], "tpot_p99_s": [...]}, "measured": {...}},
     "slo": None | {"targets", "layouts", "pick", "met", "summary", "ignored"}}

``slo`` is present when the host sets latency targets as labels (advice.perfmodel.slo).
"""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import Any

from advice.perfmodel import slo
from audit.kb.perf import aic, calibrate, model_for, predict, rounded
from audit.kb.perf.facts import CommandFacts, Load, command_facts, observed_load
from audit.kb.perf.roofline import operating_point

CURVE_POINTS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def _none(reason: str, load: Load | None = None) -> dict[str, Any]:
    return {"status": "none", "reason": reason,
            "load": asdict(load) if load else None}


def predict_commands(current_ctx: dict[str, Any], recommended_ctx: dict[str, Any] | None,
                     replicas: int = 1) -> dict[str, Any]:
    """Predictions for the running command and the recommended one (``replicas`` copies of
    it on the server's GPUs); ``recommended_ctx`` None predicts the current command only.
    Never raises: a missing fact gives ``{"status": "none", "reason": ...}``."""
    load, measured, why = observed_load(current_ctx)
    if load is None:
        return _none(f"no prediction: {why}")
    cur_f = command_facts(current_ctx)
    rec_f = command_facts(recommended_ctx, replicas) if recommended_ctx else None
    missing = cur_f.missing() + (rec_f.missing() if rec_f else [])
    if missing:
        return _none("no prediction: the knowledge base lacks " +
                     ", ".join(dict.fromkeys(missing)), load)
    accept = measured.acceptance_length
    rec_accept = accept if rec_f and rec_f.spec_method == cur_f.spec_method else None
    try:
        current = predict(cur_f, load, accept)
        recommended = predict(rec_f, load, rec_accept) if rec_f else None
        if recommended and recommended["kernel"] != current["kernel"]:
            # One model for both, or the ratio of one would scale the other's prediction.
            current = predict(cur_f, load, accept, kernel=False)
            recommended = predict(rec_f, load, rec_accept, kernel=False)
    except ValueError as exc:
        return _none(f"no prediction: {exc}", load)
    r = calibrate.ratios(current["predicted"], measured)
    ratio = calibrate.headline(r)
    kernel = current.pop("kernel")
    verdict = calibrate.judge(r, kernel)
    # The current command calibrated = what the server measured; a figure it did not report
    # is the prediction scaled by the ratio it did give.
    scaled_cur = calibrate.scale(current["predicted"], r)
    current["calibrated"] = None if scaled_cur is None else rounded({
        "tpot_s": measured.tpot_s or scaled_cur["tpot_s"],
        "ttft_s": measured.ttft_s or scaled_cur["ttft_s"],
        "output_tps": measured.output_tps or scaled_cur["output_tps"]})
    if recommended:
        recommended.pop("kernel")
        scaled = calibrate.scale(recommended["predicted"], r)
        recommended["calibrated"] = rounded(scaled) if scaled else None
    goals, ignored = slo.targets(current_ctx)
    layouts = None
    if (goals or ignored) and rec_f:
        layouts = slo.pick(rec_f, load, goals, lambda v: model_for(v, load, kernel)[0], r,
                           rec_accept) if goals else {"summary": None}
        layouts["ignored"] = ignored
    return {"status": "ok", "reason": None, "load": asdict(load), "slo": layouts,
            "measured": {"tpot_s": measured.tpot_s, "ttft_s": measured.ttft_s,
                         "output_tps": measured.output_tps},
            "current": current, "recommended": recommended,
            "calibration": {"ratios": {k: round(v, 3) if v else None for k, v in r.items()},
                            "ratio": round(ratio, 3) if ratio else None, **verdict},
            "buys": buys(current, recommended, verdict),
            "curve": curve(cur_f, rec_f, load, accept, r, current_ctx, kernel)}


def _best(side: dict[str, Any]) -> dict[str, Any]:
    return side["calibrated"] or side["predicted"]


def _fmt(value: float | None, factor: float) -> str:
    return "?" if value is None else f"{value * factor:.0f}"


def buys(current: dict[str, Any], recommended: dict[str, Any] | None,
         verdict: dict[str, Any]) -> str:
    """One line: what the recommended command changes at the observed load."""
    if recommended is None:
        return "no recommended command to compare"
    # Relative change from the two predictions (a calibration ratio cancels); the absolute
    # figures shown are the calibrated ones when the server gave its own.
    cur_p, rec_p = current["predicted"], recommended["predicted"]
    tps = rec_p["output_tps"] / cur_p["output_tps"] - 1
    tpot = rec_p["tpot_s"] / cur_p["tpot_s"] - 1
    calibrated = recommended["calibrated"] is not None
    cur = current["calibrated"] if calibrated else cur_p
    rec = _best(recommended)
    kind = "calibrated by this server" if calibrated else "uncalibrated model"
    line = (f"{tps:+.0%} output tokens/s ({_fmt(cur['output_tps'], 1)} -> "
            f"{_fmt(rec['output_tps'], 1)}), {tpot:+.0%} TPOT ({_fmt(cur['tpot_s'], 1000)} -> "
            f"{_fmt(rec['tpot_s'], 1000)} ms) at the observed load ({kind})")
    if verdict["trusted"] is False:
        line += "; model and server disagree, treat as indicative only"
    return line


def curve(cur_f: CommandFacts, rec_f: CommandFacts | None, load: Load, accept: float | None,
          r: dict[str, float | None], ctx: dict[str, Any], kernel: bool = True
          ) -> dict[str, Any]:
    """Calibrated output tokens/s and p99 TPOT vs concurrency for the chart; p99 TPOT = mean
    TPOT x the server's measured p99/p50 ratio (1 when it has none)."""
    m = ctx.get("metrics") or {}
    tail = (m["tpot_p99_s"] / m["tpot_p50_s"]) if m.get("tpot_p99_s") and m.get("tpot_p50_s") \
        else 1.0
    out: dict[str, Any] = {"concurrency": list(CURVE_POINTS), "p99_over_p50": round(tail, 3),
                           "measured": {"concurrency": load.concurrency,
                                        "output_tps": m.get("generation_tps"),
                                        "tpot_p99_s": m.get("tpot_p99_s")}}
    for name, f in (("current", cur_f), ("recommended", rec_f)):
        if f is None:
            continue
        step = model_for(f, load, kernel)[0]
        tps, tpot = [], []
        for c in CURVE_POINTS:
            try:
                point = operating_point(f, replace(load, concurrency=float(c)), step, accept)
            except (ValueError, aic.KernelDataError):
                tps.append(None)
                tpot.append(None)
                continue
            scaled = calibrate.scale(point, r) or point
            tps.append(round(scaled["output_tps"], 1))
            tpot.append(round(scaled["tpot_s"] * tail, 4))
        out[name] = {"output_tps": tps, "tpot_p99_s": tpot}
    return out


__all__ = ["predict_commands"]
