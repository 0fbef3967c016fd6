"""Live-window derivation from two `MetricSnapshot`s (see audit.kb.metrics for the parser).

Spec-decode maths follow docs/vllm-facts.md section 1.5 (vLLM's
`SpecDecodingLogging` convention): acceptance rate = accepted / draft tokens, mean acceptance
length = 1 + accepted / drafts (bonus token included), per-position rate = accepted at
position p / drafts. Percentiles follow PromQL `histogram_quantile`
(https://prometheus.io/docs/prometheus/latest/querying/functions/#histogram_quantile).
"""

from __future__ import annotations

import math
from typing import Any

from audit.kb.metrics_names import RULE_NAMES, SPEC_NAMES
from audit.kb.metrics_snapshot import Histogram, MetricSnapshot

_PERCENTILES = (
    ("ttft_p50_s", "ttft", 0.5),
    ("ttft_p99_s", "ttft", 0.99),
    ("tpot_p50_s", "tpot", 0.5),
    ("tpot_p99_s", "tpot", 0.99),
    ("itl_p50_s", "itl", 0.5),
    ("itl_p99_s", "itl", 0.99),
    ("e2e_p50_s", "e2e", 0.5),
    ("queue_p50_s", "queue_time", 0.5),
    ("prompt_len_p50", "prompt_len", 0.5),
    ("prompt_len_p90", "prompt_len", 0.9),
    ("prompt_len_p99", "prompt_len", 0.99),
)


def histogram_quantile(q: float, hist: Histogram | None) -> float | None:
    """The q-quantile (0..1) of a histogram, interpolated linearly inside its bucket.

    Same rules as PromQL: the first bucket starts at 0 (unless its bound is <= 0), buckets
    are forced monotonic, and a quantile that falls in the +Inf bucket returns the largest
    finite bound (so the true value is at least that). Returns None (never 0) when the
    histogram is absent, empty, has no finite bucket, or has neither a +Inf bucket nor a
    `_count` to give the total (PromQL returns NaN there).
    """
    if hist is None or not 0.0 <= q <= 1.0:
        return None
    finite = [(le, c) for le, c in hist.buckets if math.isfinite(le)]
    return _quantile(q, finite, _total(hist, finite))


def _quantile(q: float, finite: list[tuple[float, float]], total: float | None) -> float | None:
    """:func:`histogram_quantile` from the histogram's finite buckets and its total."""
    if not finite or total is None or not total > 0:
        return None
    rank = q * total
    prev_le, prev_count, running = 0.0, 0.0, 0.0
    for index, (le, count) in enumerate(finite):
        running = max(running, count)
        if running >= rank:
            if index == 0 and le <= 0:
                return le
            start = prev_le if index else 0.0
            width = running - prev_count
            return start + (le - start) * ((rank - prev_count) / width if width > 0 else 1.0)
        prev_le, prev_count = le, running
    return finite[-1][0]  # rank lies in +Inf: report the largest finite bound


def _total(hist: Histogram, finite: list[tuple[float, float]]) -> float | None:
    top = max((c for _, c in finite), default=0.0)
    inf = [c for le, c in hist.buckets if le == math.inf]
    if inf:
        return max(inf[-1], top)
    if hist.count is not None:
        return max(hist.count, top)
    return None


def window(
    prev: MetricSnapshot | None, cur: MetricSnapshot, elapsed_s: float | None
) -> dict[str, Any]:
    """Derived values for the interval between two scrapes of the same server process.

    `prev`: the previous snapshot of the same process, or None for "lifetime since start"
    (also used after a restart). A counter or histogram that went down between `prev` and
    `cur` means the process restarted unseen: the window falls back to lifetime and
    `counter_reset` is True. `elapsed_s`: seconds between the scrapes; rates (tok/s, /s) are
    given for delta windows with a positive `elapsed_s` only.

    Returns the keys listed in the interface doc, every key always present, None when a value
    cannot be derived (an idle window gives 0 rates/counts and None percentiles and ratios),
    plus `counter_reset`, `prompt_tokens` and `generation_tokens` (token totals in the window).
    `missing` lists canonical names of `RULE_NAMES` absent from `cur`; the spec-decode
    counters are listed only when the exposition carries some spec-decode metric but not all
    (without the server's flags this module cannot tell "spec decode off" from "metric
    absent"; rules that know `speculative_config` is set should test `spec_drafts == null`).
    """
    reset = prev is not None and _is_reset(prev, cur)
    base = None if prev is None or reset else prev
    seconds = elapsed_s if base is not None and _positive(elapsed_s) else None
    out: dict[str, Any] = {
        "window_kind": "delta" if base is not None else "lifetime",
        "window_s": seconds,
        "counter_reset": reset,
        "kv_cache_usage": cur.gauges.get("kv_cache_usage"),
        "requests_running": _as_count(cur.gauges.get("requests_running")),
        "requests_waiting": _as_count(cur.gauges.get("requests_waiting")),
    }
    out.update(_traffic(base, cur, seconds))
    deltas = _Deltas(base, cur)
    for key, canon, q in _PERCENTILES:
        out[key] = deltas.quantile(q, canon)
    out.update(_means(deltas))
    out.update(_spec(base, cur))
    out.update(_admission_and_caching(base, cur, seconds, deltas))
    out.update(_cache_config(cur.cache_config))
    out["missing"] = _missing(cur)
    out["errors"] = list(cur.errors)
    return out


def _traffic(base: MetricSnapshot | None, cur: MetricSnapshot, seconds: float | None) -> dict:
    preemptions = _delta(base, cur, "preemptions")
    prompt = _delta(base, cur, "prompt_tokens")
    generation = _delta(base, cur, "generation_tokens")
    queries = _delta(base, cur, "prefix_cache_queries")
    hits = _delta(base, cur, "prefix_cache_hits")
    hit_rate = _ratio(hits, queries)
    if hit_rate is None and queries is None:
        hit_rate = cur.gauges.get("prefix_cache_hit_rate")  # V0 cumulative gauge
    return {
        "preemptions": _as_count(preemptions),
        "preemptions_per_s": _rate(preemptions, seconds),
        "prompt_tokens": _as_count(prompt),
        "generation_tokens": _as_count(generation),
        "prompt_tps": _rate(prompt, seconds),
        "generation_tps": _rate(generation, seconds),
        "requests_finished": _as_count(_delta(base, cur, "request_success")),
        "prefix_cache_hit_rate": hit_rate,
        "mm_items": _as_count(_delta(base, cur, "mm_cache_queries")),
    }


#: (key, histogram): per-request means over the window (``_sum / _count`` of the histogram's
#: increase), the arithmetic the live invariants use (docs/knowledge-base.md "Live invariants").
_MEANS = (("ttft_mean_s", "ttft"), ("queue_mean_s", "queue_time"),
          ("prompt_len_mean", "prompt_len"), ("generation_len_mean", "generation_len"))


class _Deltas:
    """The window's histograms (:func:`_hist_delta` of ``base`` and ``cur``), each computed
    once however many quantiles and means read it, with its finite buckets and total."""

    def __init__(self, base: MetricSnapshot | None, cur: MetricSnapshot) -> None:
        self.base, self.cur = base, cur
        self._hists: dict[str, Histogram | None] = {}
        self._ranked: dict[str, tuple[list[tuple[float, float]], float | None]] = {}

    def hist(self, name: str) -> Histogram | None:
        """``_hist_delta(base, cur, name)``."""
        if name not in self._hists:
            self._hists[name] = _hist_delta(self.base, self.cur, name)
        return self._hists[name]

    def quantile(self, q: float, name: str) -> float | None:
        """``histogram_quantile(q, self.hist(name))``."""
        hist = self.hist(name)
        if hist is None or not 0.0 <= q <= 1.0:
            return None
        if name not in self._ranked:
            finite = [(le, c) for le, c in hist.buckets if math.isfinite(le)]
            self._ranked[name] = finite, _total(hist, finite)
        return _quantile(q, *self._ranked[name])


def _means(deltas: _Deltas) -> dict[str, Any]:
    """Means of the window's histograms (None without observations) and ``requests_timed``:
    how many requests got their first token in the window (the TTFT histogram's count)."""
    out: dict[str, Any] = {}
    for key, canon in _MEANS:
        hist = deltas.hist(canon)
        out[key] = _ratio(hist.sum, hist.count) if hist else None
    ttft = deltas.hist("ttft")
    out["requests_timed"] = _as_count(ttft.count) if ttft and ttft.count is not None else None
    return out


def _label_delta(base: MetricSnapshot | None, cur: MetricSnapshot,
                 canon: str) -> dict[str, float] | None:
    """Per-label-value counter increase in the window (lifetime when ``base`` is None)."""
    now = cur.by_label.get(canon)
    if now is None:
        return None
    before = (base.by_label.get(canon) or {}) if base is not None else {}
    return {k: max(v - before.get(k, 0.0), 0.0) for k, v in sorted(now.items())}


def _admission_and_caching(base: MetricSnapshot | None, cur: MetricSnapshot,
                           seconds: float | None, deltas: _Deltas) -> dict[str, Any]:
    """Metrics added in 0.19-0.33: admission rejections (0.32+, by reason), waiting requests
    by reason (0.20+), cached prompt tokens (0.19.1+), tool-parser invocations (0.24+, by
    outcome), preemptions per request (0.30+). None when the exposition lacks them."""
    rejected = _delta(base, cur, "admission_rejections")
    cached = _delta(base, cur, "prompt_tokens_cached")
    prompt = _delta(base, cur, "prompt_tokens")
    waiting = cur.by_label.get("requests_waiting") or {}
    outcomes = _label_delta(base, cur, "tool_parser_invocations")
    preempt = deltas.hist("request_preemptions")
    return {
        "admission_rejections": _as_count(rejected),
        "admission_rejections_per_s": _rate(rejected, seconds),
        "admission_rejections_by_reason": _label_delta(base, cur, "admission_rejections"),
        "requests_waiting_capacity": _as_count(waiting.get("capacity")),
        "requests_waiting_deferred": _as_count(waiting.get("deferred")),
        "prompt_tokens_cached": _as_count(cached),
        "prompt_cached_fraction": _ratio(cached, prompt),
        "tool_parser_invocations": _as_count(_delta(base, cur, "tool_parser_invocations")),
        "tool_parser_tool_calls": _as_count(outcomes.get("tool_call")) if outcomes else None,
        "request_preemptions_p99": deltas.quantile(0.99, "request_preemptions"),
        "request_preemptions_mean": _ratio(preempt.sum, preempt.count) if preempt else None,
    }


def _spec(base: MetricSnapshot | None, cur: MetricSnapshot) -> dict[str, Any]:
    drafts = _delta(base, cur, "spec_drafts")
    draft_tokens = _delta(base, cur, "spec_draft_tokens")
    accepted = _delta(base, cur, "spec_accepted_tokens")
    mean_len = _ratio(accepted, drafts)
    return {
        "spec_drafts": _as_count(drafts),
        "spec_draft_tokens": _as_count(draft_tokens),
        "spec_accepted_tokens": _as_count(accepted),
        "spec_acceptance_rate": _ratio(accepted, draft_tokens),
        "spec_mean_acceptance_length": None if mean_len is None else 1.0 + mean_len,
        "spec_per_position": _per_position(base, cur, drafts),
    }


def _per_position(
    base: MetricSnapshot | None, cur: MetricSnapshot, drafts: float | None
) -> list[float | None] | None:
    """accepted_at_pos / drafts for positions 0..max; None entries for unseen positions."""
    per_pos = cur.per_position_accepted
    if not per_pos or drafts is None or not drafts > 0:
        return None
    rates: list[float | None] = [None] * (max(per_pos) + 1)
    for pos, value in per_pos.items():
        if base is None:
            rates[pos] = value / drafts
        elif pos in base.per_position_accepted:
            rates[pos] = (value - base.per_position_accepted[pos]) / drafts
    return rates


def _cache_config(cfg: dict[str, str]) -> dict[str, Any]:
    """KV capacity (tokens) and friends from cache_config_info labels (strings, "None")."""
    size = _label_number(cfg, "kv_cache_size_tokens")
    if size is None:
        # Fallback only: on hybrid models block_size is the minimum over KV groups, so the
        # product undercounts (lmswitch capture: 15998 x 4 vs 1,428,520; vLLM issue #51163).
        blocks, block_size = _label_number(cfg, "num_gpu_blocks"), _label_number(cfg, "block_size")
        size = blocks * block_size if blocks is not None and block_size is not None else None
    dtype = cfg.get("cache_dtype")
    return {
        "kv_capacity_tokens": _as_count(size),
        "kv_max_concurrency": _label_number(cfg, "kv_cache_max_concurrency"),
        "cache_dtype": None if dtype in (None, "None", "") else dtype,
        "gpu_memory_utilization": _label_number(cfg, "gpu_memory_utilization"),
    }


def _missing(cur: MetricSnapshot) -> list[str]:
    missing = [name for name in RULE_NAMES if name not in cur.present]
    spec_seen = [n for n in (*SPEC_NAMES, "spec_per_position") if n in cur.present]
    if spec_seen:
        missing += [n for n in (*SPEC_NAMES, "spec_per_position") if n not in cur.present]
    return missing


def _is_reset(prev: MetricSnapshot, cur: MetricSnapshot) -> bool:
    """True when any counter, per-position counter or histogram went down (process restart)."""
    for name, value in cur.counters.items():
        if name in prev.counters and value < prev.counters[name]:
            return True
    for pos, value in cur.per_position_accepted.items():
        if value < prev.per_position_accepted.get(pos, value):
            return True
    for name, hist in cur.histograms.items():
        old = prev.histograms.get(name)
        if old is None:
            continue
        if hist.count is not None and old.count is not None and hist.count < old.count:
            return True
        old_buckets = dict(old.buckets)
        if any(c < old_buckets.get(le, c) for le, c in hist.buckets):
            return True
    return False


def _hist_delta(base: MetricSnapshot | None, cur: MetricSnapshot, name: str) -> Histogram | None:
    hist = cur.histograms.get(name)
    if hist is None or base is None:
        return hist
    old = base.histograms.get(name)
    if old is None or len(old.buckets) != len(hist.buckets):
        return None  # histogram new or bucket layout changed: no honest delta
    buckets = []
    for (le, count), (old_le, old_count) in zip(hist.buckets, old.buckets, strict=True):
        if le != old_le:
            return None  # bucket layout changed
        buckets.append((le, count - old_count))
    return Histogram(buckets, _sub(hist.sum, old.sum), _sub(hist.count, old.count))


def _delta(base: MetricSnapshot | None, cur: MetricSnapshot, name: str) -> float | None:
    value = cur.counters.get(name)
    if value is None or base is None:
        return value
    old = base.counters.get(name)
    return None if old is None else value - old


def _sub(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or not den > 0:
        return None
    return num / den


def _rate(value: float | None, seconds: float | None) -> float | None:
    return None if value is None or seconds is None else value / seconds


def _positive(x: float | None) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def _as_count(x: float | None) -> float | int | None:
    """Integral floats become int so messages read "64 running", not "64.0 running"."""
    if x is None or not math.isfinite(x):
        return None if x is None else x
    return int(x) if x == int(x) else x


def _label_number(cfg: dict[str, str], key: str) -> float | None:
    raw = cfg.get(key)
    if raw is None or raw in ("None", ""):
        return None
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if math.isfinite(value) else None
