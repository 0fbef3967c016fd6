"""The parsed form of one ``/metrics`` scrape: :class:`MetricSnapshot` and :class:`Histogram`.

Split from :mod:`audit.kb.metrics` (the parser, which builds them) so
:mod:`audit.kb.metrics_window` (windows between two snapshots) depends on the data shape
only, not on the parser that imports it. Field reference: docs/knowledge-base.md,
"Context reference".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Histogram:
    """One Prometheus histogram summed over engines/models.

    `buckets`: sorted `(upper bound, cumulative count)` pairs, upper bound may be `math.inf`;
    `sum` / `count`: the `_sum` / `_count` samples, None when the exposition lacks them.
    Units are those of the metric (seconds for latencies, tokens for lengths).
    """

    buckets: list[tuple[float, float]] = field(default_factory=list)
    sum: float | None = None
    count: float | None = None


@dataclass
class MetricSnapshot:
    """Canonical view of one `/metrics` scrape.

    - `counters`: canonical counter name -> lifetime total (tokens, requests, drafts...).
    - `gauges`: `kv_cache_usage` (0..1, mean over engines), `requests_running`,
      `requests_waiting` (sums), and for V0 `prefix_cache_hit_rate` (0..1, absent when V0
      reports -1 = prefix caching disabled).
    - `histograms`: canonical histogram name -> `Histogram`.
    - `per_position_accepted`: spec-decode position (0-based) -> accepted drafts at it.
    - `cache_config`: labels of `vllm:cache_config_info` (V1 gauge or V0 Info) as strings,
      without `engine` (the lowest engine index wins under data parallelism).
    - `model_names`: sorted `model_name` label values; `engines`: sorted `engine` values.
    - `era`: "v0", "v1-early" (V1 engine before the `engine` label), "v1", or "unknown" when
      the text holds no `vllm:` sample at all (e.g. `--disable-log-stats`).
    - `present`: canonical names found; `errors`: parse problems (lines skipped, bad values).
    - `by_label`: for the series of `metrics_names.LABELLED`, canonical name -> {label value:
      value summed over the other labels} (admission rejections by reason, waiting requests
      by reason, tool-parser invocations by outcome).
    """

    counters: dict[str, float] = field(default_factory=dict)
    gauges: dict[str, float] = field(default_factory=dict)
    histograms: dict[str, Histogram] = field(default_factory=dict)
    per_position_accepted: dict[int, float] = field(default_factory=dict)
    cache_config: dict[str, str] = field(default_factory=dict)
    model_names: list[str] = field(default_factory=list)
    engines: list[str] = field(default_factory=list)
    era: str = "unknown"
    present: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)
    by_label: dict[str, dict[str, float]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict (``+Inf`` bucket bounds as the string "+Inf"), so the previous
        scrape can be kept parsed instead of re-parsing its text on the next report."""
        return {
            "counters": self.counters, "gauges": self.gauges,
            "histograms": {name: {"buckets": [["+Inf" if math.isinf(le) else le, n]
                                              for le, n in h.buckets],
                                  "sum": h.sum, "count": h.count}
                           for name, h in self.histograms.items()},
            "per_position_accepted": {str(k): v for k, v in self.per_position_accepted.items()},
            "cache_config": self.cache_config, "model_names": self.model_names,
            "engines": self.engines, "era": self.era, "present": sorted(self.present),
            "errors": self.errors, "by_label": self.by_label,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> MetricSnapshot:
        """The inverse of :meth:`to_json`. Raises ``KeyError``/``ValueError`` on a dict that
        :meth:`to_json` did not produce."""
        histograms = {
            name: Histogram([(math.inf if le == "+Inf" else float(le), float(n))
                             for le, n in h["buckets"]], h["sum"], h["count"])
            for name, h in data["histograms"].items()}
        return cls(counters=dict(data["counters"]), gauges=dict(data["gauges"]),
                   histograms=histograms,
                   per_position_accepted={int(k): v for k, v in
                                          data["per_position_accepted"].items()},
                   cache_config=dict(data["cache_config"]),
                   model_names=list(data["model_names"]), engines=list(data["engines"]),
                   era=data["era"], present=set(data["present"]),
                   errors=list(data["errors"]),
                   by_label={k: dict(v) for k, v in (data.get("by_label") or {}).items()})
