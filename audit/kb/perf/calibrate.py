"""Calibration by the server's own metrics, and the fleet-wide calibration error.

ratio = measured / predicted for the CURRENT command at the server's observed load (TPOT and
TTFT: measured median over predicted; throughput: predicted over measured, so that every
ratio above 1 means "the server is slower than the model"). The recommended command's
prediction is scaled by the same ratios: what the model gets wrong about this GPU, kernel
and workload it gets wrong the same way for a neighbouring command.

Trust bands (a ratio outside says the model and the server disagree too much to carry the
ratio over, and a server far slower than its prediction is itself worth a look):

- roofline: :data:`ROOFLINE_BAND`. The roofline runs at datasheet peak, so a healthy server
  is slower by a steady factor: on the seed operating points the TPOT ratio spans 1.26
  (GB10, 31B NVFP4, one stream) to 3.47 (H100, TP=2, 4K prompts); BENCHMARKS.md,
  "Performance model". Band = [0.8, 6.0]: that span with a margin each side (our choice).
  TTFT holds queueing the roofline only approximates: the one healthy seed TTFT ratio is 5.5
  (TP=2, 16K prompts at c=128), so its band is :data:`ROOFLINE_TTFT_BAND` = [0.5, 10].
- kernel data (aiconfigurator): :data:`KERNEL_BAND`, a factor of two either way (our choice:
  the kernels are measured, not peak, so a healthy server should sit near 1).
"""

from __future__ import annotations

import math
from statistics import median
from typing import Any

ROOFLINE_BAND = (0.8, 6.0)
ROOFLINE_TTFT_BAND = (0.5, 10.0)
KERNEL_BAND = (0.5, 2.0)


def _ratio(measured: float | None, predicted: float | None, invert: bool = False) -> float | None:
    if not measured or not predicted or measured <= 0 or predicted <= 0:
        return None
    return predicted / measured if invert else measured / predicted


def ratios(predicted: dict[str, float], measured: Any) -> dict[str, float | None]:
    """``{"tpot", "ttft", "output_tps"}`` ratios (> 1: the server is slower than the model)."""
    return {"tpot": _ratio(measured.tpot_s, predicted["tpot_s"]),
            "ttft": _ratio(measured.ttft_s, predicted["ttft_s"]),
            "output_tps": _ratio(measured.output_tps, predicted["output_tps"], invert=True)}


def headline(r: dict[str, float | None]) -> float | None:
    """The ratio that carries over: TPOT's, else throughput's."""
    return r["tpot"] if r["tpot"] is not None else r["output_tps"]


def judge(r: dict[str, float | None], kernel: bool) -> dict[str, Any]:
    """``{"trusted": bool | None, "band": [lo, hi], "why": str}`` for one server's ratios
    (TPOT or throughput against the band; TTFT against its own band when measured)."""
    lo, hi = KERNEL_BAND if kernel else ROOFLINE_BAND
    t_lo, t_hi = KERNEL_BAND if kernel else ROOFLINE_TTFT_BAND
    ratio, ttft = headline(r), r["ttft"]
    if ratio is None:
        return {"trusted": None, "band": [lo, hi],
                "why": "the server reports no TPOT or throughput at this load: uncalibrated"}
    if ratio > hi or (ttft is not None and ttft > t_hi):
        what = f"TPOT {ratio:.1f}x" if ratio > hi else f"TTFT {ttft:.0f}x"
        return {"trusted": False, "band": [lo, hi],
                "why": f"the server is far slower than the model predicts ({what}; healthy "
                       f"TPOT {lo}-{hi}x, TTFT {t_lo}-{t_hi}x): misconfigured, throttled or "
                       "queueing past its capacity; worth a look before trusting any "
                       "prediction for it"}
    if ratio < lo:
        return {"trusted": False, "band": [lo, hi],
                "why": f"the server is faster than the model predicts ({ratio:.2f}x): check "
                       "the measurement (histogram buckets, the load it was taken at) or what "
                       "the model misses (prefix-cache hits, a higher draft acceptance)"}
    return {"trusted": True, "band": [lo, hi],
            "why": f"ratio {ratio:.2f} inside the healthy band {lo}-{hi}"}


def scale(predicted: dict[str, float], r: dict[str, float | None]) -> dict[str, float] | None:
    """The recommended command's prediction scaled by the current command's ratios."""
    tpot = r["tpot"] or r["output_tps"]
    if tpot is None:
        return None
    tps = r["output_tps"] or tpot
    ttft = r["ttft"] or tpot
    return {"tpot_s": predicted["tpot_s"] * tpot, "ttft_s": predicted["ttft_s"] * ttft,
            "output_tps": predicted["output_tps"] / tps}


def fleet(ratios_seen: list[float]) -> dict[str, Any]:
    """Calibration error across the fleet: ``{"servers", "median_ratio", "spread"}``; spread
    is the largest factor between one server's ratio and the median (1.0 = all agree)."""
    values = [r for r in ratios_seen if r and r > 0]
    if not values:
        return {"servers": 0, "median_ratio": None, "spread": None}
    mid = median(values)
    spread = max(math.exp(abs(math.log(v / mid))) for v in values)
    return {"servers": len(values), "median_ratio": round(mid, 3), "spread": round(spread, 3)}
