"""Counters and histograms of one simulated vLLM server, advancing with wall-clock time.

A :class:`Workload` holds the figures a seed measured (output tok/s, TPOT, TTFT, draft
acceptance per position, concurrency, KV usage); :class:`TrafficState` integrates them
over real elapsed seconds, so the rates the dashboard derives from two scrapes equal the
workload's (the demo's ``--speed`` compresses the timeline, never the physics).

Histograms are filled with the expected count per bucket of a log-normal distribution
with the workload's median (sigma :data:`SIGMA`), so the dashboard's interpolated
median lands near the seed figure; counts are floored when rendered so cumulative
buckets stay integral and monotonic. Spec-decode counters follow vllm-facts.md 1.5:
``drafts = generated / (1 + sum(per_position))``, draft tokens = ``k * drafts``,
accepted at position p = ``per_position[p] * drafts``.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from demo.eras import Era, era_for

#: Spread (log-space standard deviation) of every simulated latency/length distribution.
SIGMA = 0.35
#: Relative jitter of rates and gauges between scrapes (deterministic per server).
JITTER = 0.06


@dataclass(frozen=True)
class Workload:
    """Steady-state figures of a server (units: tok/s, seconds, tokens, ratios 0..1).

    ``per_position``: accepted tokens per draft at each position (len = k); empty
    without speculative decoding. ``abort_fraction``: share of finished requests that
    were aborted (client timeouts). ``source`` names where the figures come from.
    """

    gen_tps: float
    prompt_len: float
    gen_len: float
    ttft_s: float
    tpot_s: float
    running: float
    waiting: float = 0.0
    kv_usage: float = 0.3
    per_position: tuple[float, ...] = ()
    prefix_hit_rate: float = 0.2
    abort_fraction: float = 0.0
    preemptions_per_s: float = 0.0
    queue_s: float | None = None
    source: str = ""

    @property
    def request_rate(self) -> float:
        """Finished requests per second (output rate / output tokens per request)."""
        return self.gen_tps / max(1.0, self.gen_len)

    def with_changes(self, **changes: Any) -> Workload:
        """A copy with ``changes`` applied."""
        return replace(self, **changes)


def lognormal_cdf(x: float, median: float, sigma: float = SIGMA) -> float:
    """P(X <= x) for a log-normal with ``median`` and log-space ``sigma``."""
    if x <= 0 or median <= 0:
        return 0.0
    return 0.5 * (1.0 + math.erf((math.log(x) - math.log(median)) / (sigma * math.sqrt(2))))


def interpolated_median(median: float, bounds: tuple[float, ...]) -> float:
    """The median a PromQL-style ``histogram_quantile(0.5)`` reads from log-normal(median)
    counts in ``bounds`` (linear interpolation inside the bucket)."""
    prev_le, prev_cdf = 0.0, 0.0
    for le in bounds:
        cdf = lognormal_cdf(le, median)
        if cdf >= 0.5:
            width = cdf - prev_cdf
            return prev_le + (le - prev_le) * ((0.5 - prev_cdf) / width if width > 0 else 1.0)
        prev_le, prev_cdf = le, cdf
    return bounds[-1] if bounds else median


@lru_cache(maxsize=512)
def calibrated_median(target: float, bounds: tuple[float, ...]) -> float:
    """The log-normal median whose bucket-interpolated median equals ``target``.

    Buckets are coarse (e.g. TTFT 10 s -> 20 s), so filling them from the true median
    would make the dashboard read e.g. 14.4 s for a seed's 13.35 s; calibrating keeps
    the figure a reader compares with the seed. Bisection in log space, 40 steps.
    """
    if target <= 0 or not bounds or target >= bounds[-1]:
        return target
    low, high = math.log(target) - 2.0, math.log(target) + 2.0
    for _ in range(40):
        mid = (low + high) / 2
        if interpolated_median(math.exp(mid), bounds) < target:
            low = mid
        else:
            high = mid
    return math.exp((low + high) / 2)


@dataclass
class _Hist:
    total: float = 0.0
    total_sum: float = 0.0
    buckets: dict[float, float] = field(default_factory=dict)


@dataclass
class TrafficState:
    """Cumulative metric state of one server process since ``started_at`` (Unix s)."""

    model_name: str
    version: str
    workload: Workload
    started_at: float
    max_model_len: int = 65536
    spec_k: int = 0
    cache: dict[str, str] = field(default_factory=dict)
    seed: int = 0
    counters: dict[str, float] = field(default_factory=dict)
    hists: dict[str, _Hist] = field(default_factory=dict)
    last: float = 0.0
    gauges: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.last = self.last or self.started_at
        self._observe_gauges()

    @property
    def era(self) -> Era:
        """The naming era of this server's version."""
        return era_for(self.version)

    def restart(self, at: float, version: str | None = None) -> None:
        """A new process: every counter and histogram starts again from zero."""
        self.started_at, self.last = at, at
        self.version = version or self.version
        self.counters.clear()
        self.hists.clear()

    def advance(self, now: float) -> None:
        """Integrate the workload from the last call up to ``now`` (Unix seconds)."""
        dt = max(0.0, now - self.last)
        self.last = max(self.last, now)
        if dt <= 0:
            return
        w = self.workload
        jitter = 1.0 + JITTER * (2 * self.rng.random() - 1)
        gen = w.gen_tps * dt * jitter
        requests = w.request_rate * dt * jitter
        self._add("vllm:generation_tokens", gen)
        self._add("vllm:prompt_tokens", requests * w.prompt_len)
        self._add("vllm:prefix_cache_queries", requests * w.prompt_len)
        self._add("vllm:prefix_cache_hits", requests * w.prompt_len * w.prefix_hit_rate)
        self._add("vllm:num_preemptions", w.preemptions_per_s * dt)
        self._add("finished:abort", requests * w.abort_fraction)
        self._add("finished:length", requests * (1 - w.abort_fraction) * 0.3)
        self._add("finished:stop", requests * (1 - w.abort_fraction) * 0.7)
        if w.per_position:
            drafts = gen / (1.0 + sum(w.per_position))
            self._add("vllm:spec_decode_num_drafts", drafts)
            self._add("vllm:spec_decode_num_draft_tokens", drafts * len(w.per_position))
            self._add("vllm:spec_decode_num_accepted_tokens", drafts * sum(w.per_position))
            for pos, rate in enumerate(w.per_position):
                self._add(f"per_pos:{pos}", drafts * rate)
        self._observe(requests, gen)
        self._observe_gauges()

    def _add(self, key: str, value: float) -> None:
        self.counters[key] = self.counters.get(key, 0.0) + max(0.0, value)

    def _medians(self) -> dict[str, float]:
        w = self.workload
        queue = w.queue_s if w.queue_s is not None else 0.1 * w.ttft_s
        return {"ttft": w.ttft_s, "itl": w.tpot_s, "tpot": w.tpot_s,
                "e2e": w.ttft_s + w.gen_len * w.tpot_s, "queue": queue,
                "prompt_len": w.prompt_len, "gen_len": w.gen_len}

    def _observe(self, requests: float, tokens: float) -> None:
        for kind, median in self._medians().items():
            count = tokens if kind == "itl" else requests
            hist = self.hists.setdefault(kind, _Hist())
            hist.total += count
            hist.total_sum += count * median * math.exp(SIGMA ** 2 / 2)  # log-normal mean

    def _observe_gauges(self) -> None:
        w = self.workload
        wobble = 1.0 + JITTER * (2 * self.rng.random() - 1)
        self.gauges = {"running": max(0.0, round(w.running * wobble)),
                       "waiting": max(0.0, round(w.waiting * wobble)),
                       "kv": min(1.0, max(0.0, w.kv_usage * (1 + (wobble - 1) / 3)))}

    def counter_samples(self, name: str) -> list[tuple[dict[str, str], float]]:
        """(extra labels, value) pairs of a driven counter family."""
        if name == "vllm:request_success":
            reasons = ["stop", "length", "abort"]
            if self.era.since in ("0.20.0", "0.29.0"):
                reasons += ["error", "repetition"]  # pre-created from 0.25.1 (INDEX.md)
            return [({"finished_reason": r}, self.counters.get(f"finished:{r}", 0.0))
                    for r in reasons]
        if name == "vllm:spec_decode_num_accepted_tokens_per_pos":
            return [({"position": str(p)}, self.counters.get(f"per_pos:{p}", 0.0))
                    for p in range(self.spec_k)]
        return [({}, self.counters.get(name, 0.0))]

    def gauge_samples(self, name: str) -> list[tuple[dict[str, str], float]]:
        """(extra labels, value) pairs of a driven gauge family."""
        if name == "vllm:num_requests_running":
            return [({}, self.gauges["running"])]
        if name == "vllm:num_requests_waiting":
            return [({}, self.gauges["waiting"])]
        if name == "vllm:num_requests_waiting_by_reason":
            return [({"reason": "capacity"}, self.gauges["waiting"]), ({"reason": "deferred"}, 0.0)]
        return [({}, round(self.gauges["kv"], 6))]

    def histogram(self, kind: str, name: str,
                  bounds: tuple[float, ...]) -> tuple[list[float], float, float]:
        """(cumulative bucket counts, total count, sum) for ``bounds``, floored to integers."""
        hist = self.hists.get(kind) or _Hist()
        median = self._medians()[kind]
        # Expected counts from the CDF of the *current* median: a workload change (collapse)
        # shows in the next window because earlier observations keep their own counts.
        for le in bounds:
            hist.buckets.setdefault(le, 0.0)
        self._settle(kind, hist, median, bounds)
        total = math.floor(hist.total)
        cumulative = [min(total, math.floor(hist.buckets[le])) for le in bounds]
        return cumulative, float(total), hist.total_sum

    def _settle(self, kind: str, hist: _Hist, median: float, bounds: tuple[float, ...]) -> None:
        """Distribute observations added since the last render over ``bounds``."""
        key = f"settled:{kind}:{len(bounds)}"
        new = hist.total - self.counters.get(key, 0.0)
        if new <= 0:
            return
        fill = calibrated_median(median, bounds)
        for le in bounds:
            hist.buckets[le] += new * lognormal_cdf(le, fill)
        self.counters[key] = hist.total

    def cache_config_line(self, line: str) -> str:
        """A ``cache_config_info`` sample with this server's values in the labels it has."""
        for key, value in self.cache.items():
            line = re.sub(rf'(?<=[{{,]){re.escape(key)}="[^"]*"', f'{key}="{value}"', line)
        return line
