"""Parse a vLLM `/metrics` body into canonical values and derive live windows from two scrapes.

Public API (contract: docs/knowledge-base.md, section "Context reference"):

- `parse(text) -> MetricSnapshot`: never raises; problems are listed in `snapshot.errors`.
- `from_compact(compact) -> MetricSnapshot`: the same snapshot from the agent's compact form
  (``servers[].metrics.compact``, docs/wire-contract.md) without any text parsing; never raises.
- `window(prev, cur, elapsed_s) -> dict`: derived values for one interval (see
  `audit.kb.metrics_window.window`).
- `histogram_quantile(q, hist)`: Prometheus `histogram_quantile` semantics on one histogram.

Design notes:

- The text is parsed with `prometheus_client.parser.text_string_to_metric_families`, but only
  the sample lines of the `vllm:` families this module maps (see `audit.kb.metrics_names`) are
  handed to it: `python_*`, `process_*`, `http_*`, `_created` and unused `vllm:` histograms make
  up most of a real capture and dominate parse time (label parsing is per character). HELP/TYPE
  lines are dropped too, so every sample arrives untyped and is classified by its name suffix
  (`_bucket`/`_sum`/`_count`/`_total`); this also covers captures that lack HELP/TYPE.
- If prometheus_client rejects the selected text as a whole, each line is parsed on its own and
  the bad ones are recorded in `errors`, so one broken line never loses the others.
- Series are summed over the `engine` (data-parallel) and `model_name` labels; the KV usage gauge
  is averaged instead (vllm-facts.md 1.1: every engine reports its own 0..1 usage).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any, NamedTuple

from prometheus_client.parser import text_string_to_metric_families

from audit.kb.metrics_names import (
    GAUGE_MEAN,
    LABELLED,
    LINKED_COUNTERS,
    SAMPLE_INDEX,
    V0_ONLY,
    V1_ONLY,
)
from audit.kb.metrics_snapshot import Histogram, MetricSnapshot
from audit.kb.metrics_window import histogram_quantile, window

__all__ = ["Histogram", "MetricSnapshot", "from_compact", "histogram_quantile", "parse",
           "scrape_snapshot", "window"]

MAX_ERRORS = 20  # keep `errors` readable on garbage input; the rest is counted in one line
MAX_POSITION = 64  # spec-decode positions beyond this are garbage (k is single digits in practice)
_NAME_RE = re.compile(r"[^{\s]*")


def parse(text: Any) -> MetricSnapshot:
    """Parse a raw Prometheus text exposition of a vLLM server.

    `text`: str (bytes are decoded as UTF-8 with replacement; anything else gives an empty
    snapshot with an error). Never raises: every problem lands in `errors`.
    """
    snap = MetricSnapshot()
    try:
        body = _coerce_text(text, snap.errors)
        lines, names, has_engine = _select_lines(body, snap.errors)
        snap.era = _detect_era(names, has_engine)
        samples = _parse_lines(lines, snap.errors)
        _Aggregator(snap).run(samples)
    except Exception as exc:  # parse() promises callers (Celery, bench) it never raises
        _add_error(snap.errors, f"internal error: {type(exc).__name__}: {exc}")
    return snap


class _Sample(NamedTuple):
    """One sample as :class:`_Aggregator` reads it (prometheus_client's ``Sample`` shape)."""

    name: str
    labels: dict[str, str]
    value: float


def from_compact(compact: Any) -> MetricSnapshot:
    """The snapshot of one scrape sent in compact form (a dict shaped as
    ``fleet_agent.schema.MetricsCompact``): the same values :func:`parse` gives for the text
    the agent compacted, from numbers alone. Never raises: problems land in ``errors``."""
    snap = MetricSnapshot()
    try:
        samples, names, has_engine = _compact_samples(compact)
        if not names and (compact.get("vllm_names") or 0) > 0:
            names = {"vllm:"}  # as parse(): the body had vLLM names, none of them mapped
        snap.era = _detect_era(names, has_engine)
        _Aggregator(snap).run(samples, compact.get("histograms") or {})
    except Exception as exc:  # as parse(): the worker must never fail on a body
        _add_error(snap.errors, f"internal error: {type(exc).__name__}: {exc}")
    return snap


def scrape_snapshot(block: Any) -> MetricSnapshot | None:
    """The snapshot of one report's ``servers[].metrics`` block (JSON as stored): from the
    compact form when the agent sent one (the text, if any, is then only kept), else from the
    text; None when the block holds neither."""
    if not isinstance(block, dict):
        return None
    if isinstance(block.get("compact"), dict):
        return from_compact(block["compact"])
    text = block.get("text")
    return parse(text) if isinstance(text, str) and text.strip() else None


def _compact_samples(compact: dict[str, Any]) -> tuple[list[_Sample], set[str], bool]:
    """The plain samples of a compact block, the vLLM names it holds (histograms as their
    ``_bucket`` name, as the text has them) and whether any series has an engine label."""
    samples: list[_Sample] = []
    names: set[str] = set()
    for name, series in (compact.get("samples") or {}).items():
        names.add(_normalise(name))
        samples.extend(_Sample(name, labels, value) for labels, value in series)
    has_engine = compact.get("vllm_engine_label") is True \
        or any("engine" in s.labels for s in samples)
    for family, series in (compact.get("histograms") or {}).items():
        names.add(_normalise(family) + "_bucket")
        has_engine = has_engine or any("engine" in (h.get("labels") or {}) for h in series)
    return samples, names, has_engine


def _coerce_text(text: Any, errors: list[str]) -> str:
    if isinstance(text, str):
        return text
    if isinstance(text, (bytes, bytearray)):
        return bytes(text).decode("utf-8", errors="replace")
    _add_error(errors, f"expected str, got {type(text).__name__}")
    return ""


def _normalise(name: str) -> str:
    # Some scrapers rewrite the colon (`vllm_num_requests_running`); map back to vLLM's name.
    if name.startswith("vllm_"):
        return "vllm:" + name[5:]
    return name


#: Longest sample line handed to prometheus_client. Its label parser costs the square of an
#: escaped label value's length (a 2 MB line of ``\"`` took 25 s); vLLM's own
#: lines are under 1 KiB, so a longer one is skipped and noted, and parsing stays linear.
MAX_LINE_CHARS = 4096
#: Most backslashes in one sample line: each escape makes prometheus_client rescan the rest of
#: the label value, so a line of escaped quotes costs the square of its length even under
#: MAX_LINE_CHARS (bench/hostile_inputs.py: 3 MiB of such lines took 3.4 s). vLLM's label
#: values (model names, engine indices, bucket bounds) carry none.
MAX_LINE_ESCAPES = 32
#: Characters of mapped sample lines handed to prometheus_client per scrape (~1 s/MiB of
#: dense labels at worst); the largest real capture selects under 80 KiB, data parallelism
#: multiplies that by the engine count, so 1 MiB leaves room for DP=8 and bounds the cost.
MAX_SAMPLE_CHARS = 1024 * 1024


def _select_lines(body: str, errors: list[str] | None = None,
                  ) -> tuple[list[tuple[int, str]], set[str], bool]:
    """Keep the sample lines this module maps; remember every vllm name for era detection.
    Lines over :data:`MAX_LINE_CHARS` or :data:`MAX_LINE_ESCAPES` are skipped (noted in
    ``errors``)."""
    keep: list[tuple[int, str]] = []
    names: set[str] = set()
    has_engine = False
    kept_chars = 0
    for lineno, raw in enumerate(body.split("\n"), start=1):
        if not raw.startswith("vllm") and not raw[:1].isspace():
            continue  # comments, blank lines and non-vLLM families (checked before strip: speed)
        line = raw.strip()
        if not line.startswith("vllm"):
            continue
        match = _NAME_RE.match(line)
        name = _normalise(match.group() if match else "")
        names.add(name)
        if not has_engine and 'engine="' in line:
            has_engine = True
        if name in SAMPLE_INDEX or name in LABELLED:
            if len(line) > MAX_LINE_CHARS or line.count("\\") > MAX_LINE_ESCAPES:
                if errors is not None:
                    _add_error(errors, f"line {lineno} skipped: {len(line)} characters, "
                                       f"{line.count(chr(92))} backslashes (at most "
                                       f"{MAX_LINE_CHARS} and {MAX_LINE_ESCAPES}): {line[:120]}")
                continue
            kept_chars += len(line)
            if kept_chars > MAX_SAMPLE_CHARS:
                if errors is not None:
                    _add_error(errors, f"line {lineno} and later skipped: over "
                                       f"{MAX_SAMPLE_CHARS} characters of mapped vLLM samples")
                break
            keep.append((lineno, line))
    return keep, names, has_engine


def _detect_era(names: set[str], has_engine: bool) -> str:
    if not names:
        return "unknown"
    if has_engine:
        return "v1"
    if names & V0_ONLY:
        return "v0"
    v1_hints = V1_ONLY | {"vllm:num_requests_running", "vllm:num_requests_waiting"}
    # V0 always emitted num_requests_swapped next to running/waiting (V0_ONLY above), so
    # running/waiting without it is the early V1 engine (production-stack#318 capture).
    return "v1-early" if names & v1_hints else "v0"


def _families_samples(text: str) -> list[Any]:
    return [s for fam in text_string_to_metric_families(text) for s in fam.samples]


def _whole(text: str) -> list[Any] | None:
    try:
        return _families_samples(text)
    except Exception:  # prometheus_client raises ValueError and others on malformed input
        return None  # the caller retries line by line and records each bad line


def _parse_lines(lines: list[tuple[int, str]], errors: list[str]) -> list[Any]:
    """Parse the selected lines at once; on failure line by line: a bad line loses only itself."""
    if not lines:
        return []
    whole = _whole("\n".join(line for _, line in lines) + "\n")
    if whole is not None:
        return whole
    samples: list[Any] = []
    for lineno, line in lines:
        try:
            samples.extend(_families_samples(line + "\n"))
        except Exception as exc:
            _add_error(errors, f"line {lineno} skipped ({type(exc).__name__}: {exc}): {line[:120]}")
    return samples


def _add_error(errors: list[str], message: str) -> None:
    if len(errors) < MAX_ERRORS:
        errors.append(message)
    elif len(errors) == MAX_ERRORS:
        errors.append("further errors omitted")


#: Parsed bucket bounds by (family, le texts, counts given): a vLLM release sends the same
#: few bound lists in every report. Cleared when full, since the texts are the agent's.
_BOUNDS: dict[tuple[str, tuple[Any, ...], int], tuple[list[tuple[int, float]], list[str]]] = {}
_BOUNDS_MAX = 1024


def _bucket_bounds(family: str, le_texts: list[Any],
                   counts: int) -> tuple[list[tuple[int, float]], list[str]]:
    """``([(index into counts, upper bound), ...], errors)`` of one compact series' ``le``
    texts paired with its first ``counts`` counts, as ``dict(zip(le, counts))`` pairs them
    (a repeated text counts once, with its last count); a bound that is no number or NaN is
    left out with an error message."""
    key = (family, tuple(le_texts), counts)
    found = _BOUNDS.get(key)
    if found is not None:
        return found
    last = {text: index for index, text in enumerate(le_texts[:counts])}
    bounds, errors = [], []
    for text, index in last.items():
        try:
            le = float(text)
        except (TypeError, ValueError):
            errors.append(f"{family}_bucket without a numeric le label, ignored")
            continue
        if math.isnan(le):
            errors.append(f"{family}_bucket with le=NaN, ignored")
            continue
        bounds.append((index, le))
    if len(_BOUNDS) >= _BOUNDS_MAX:
        _BOUNDS.clear()
    _BOUNDS[key] = (bounds, errors)
    return bounds, errors


class _Aggregator:
    """Sum parsed samples into canonical values, then resolve old/new name priorities."""

    def __init__(self, snap: MetricSnapshot) -> None:
        self.snap = snap
        self.counters: dict[tuple[str, int], float] = {}
        self.gauges: dict[tuple[str, int], list[float]] = {}
        self.hists: dict[tuple[str, int], dict[str, Any]] = {}
        self.models: set[str] = set()
        self.engines: set[str] = set()
        self.info_engine: str | None = None

    def run(self, samples: Iterable[Any],
            histograms: dict[str, list[dict[str, Any]]] | None = None) -> None:
        """Aggregate ``samples`` and the compact form's ``histograms`` (family -> series
        with bucket arrays, read without one sample object per bucket), then resolve."""
        series: dict[tuple[str, tuple[tuple[str, str], ...]], Any] = {}
        for s in samples:  # a repeated series (same name and labels) counts once: last wins
            series[(s.name, tuple(sorted(s.labels.items())))] = s
        for s in series.values():
            self._add(s)
        for family, hist_series in (histograms or {}).items():
            self._add_compact_hist(family, hist_series)
        self._resolve()

    def _add_compact_hist(self, family: str, series: list[dict[str, Any]]) -> None:
        entry = SAMPLE_INDEX.get(_normalise(family) + "_bucket")
        if entry is None or entry[0] != "hist":
            return
        _kind, canon, prio, _role = entry
        latest = {tuple(sorted((h.get("labels") or {}).items())): h for h in series}
        for hist in latest.values():  # a repeated series counts once (last wins), as above
            self._note_labels(hist.get("labels") or {})
            acc = self.hists.setdefault((canon, prio), {"buckets": {}, "sum": None,
                                                        "count": None})
            counts = hist.get("counts") or []
            bounds, errors = _bucket_bounds(family, hist.get("le") or [], len(counts))
            for message in errors:
                _add_error(self.snap.errors, message)
            buckets = acc["buckets"]
            for index, le in bounds:
                buckets[le] = buckets.get(le, 0.0) + float(counts[index])
            for role in ("sum", "count"):
                if hist.get(role) is not None:
                    acc[role] = (acc[role] or 0.0) + float(hist[role])

    def _add(self, sample: Any) -> None:
        name = _normalise(sample.name)
        self._add_labelled(name, sample)
        entry = SAMPLE_INDEX.get(name)
        if entry is None:
            return
        kind, canon, prio, role = entry
        labels: dict[str, str] = sample.labels
        value = float(sample.value)
        if kind == "info":
            self._add_info(labels)
            return
        if not math.isfinite(value):
            _add_error(self.snap.errors, f"non-finite value {value} for {name}, ignored")
            return
        self._note_labels(labels)
        if kind == "counter":
            self.counters[(canon, prio)] = self.counters.get((canon, prio), 0.0) + value
        elif kind == "gauge":
            self.gauges.setdefault((canon, prio), []).append(value)
        elif kind == "hist":
            self._add_hist(canon, prio, role, labels, value, name)
        elif kind == "perpos":
            self._add_position(labels, value)

    def _add_labelled(self, name: str, sample: Any) -> None:
        """Keep the per-label-value total of the LABELLED series (e.g. waiting by reason)."""
        found = LABELLED.get(name)
        value = float(sample.value)
        if found is None or not math.isfinite(value):
            return
        canon, label = found
        key = str(sample.labels.get(label, ""))[:64]
        per_value = self.snap.by_label.setdefault(canon, {})
        if key in per_value or len(per_value) < 32:  # label values are hostile input
            per_value[key] = per_value.get(key, 0.0) + value

    def _note_labels(self, labels: dict[str, str]) -> None:
        model = labels.get("model_name")
        if model:
            self.models.add(model)
        engine = labels.get("engine")
        if engine is not None:
            self.engines.add(engine)

    def _add_info(self, labels: dict[str, str]) -> None:
        engine = labels.get("engine", "")
        # DP engines share one CacheConfig; keep the lowest engine index deterministically.
        if self.info_engine is None or _engine_key(engine) < _engine_key(self.info_engine):
            self.info_engine = engine
            self.snap.cache_config = {k: v for k, v in labels.items() if k != "engine"}

    def _add_hist(
        self, canon: str, prio: int, role: str, labels: dict[str, str], value: float, name: str
    ) -> None:
        acc = self.hists.setdefault((canon, prio), {"buckets": {}, "sum": None, "count": None})
        if role == "bucket":
            try:
                le = float(labels["le"])
            except (KeyError, ValueError):
                _add_error(self.snap.errors, f"{name} without a numeric le label, ignored")
                return
            if math.isnan(le):
                _add_error(self.snap.errors, f"{name} with le=NaN, ignored")
                return
            acc["buckets"][le] = acc["buckets"].get(le, 0.0) + value
        else:
            acc[role] = (acc[role] or 0.0) + value

    def _add_position(self, labels: dict[str, str], value: float) -> None:
        try:
            pos = int(labels["position"])
        except (KeyError, ValueError):
            _add_error(self.snap.errors, "per-position sample without an integer position")
            return
        if not 0 <= pos <= MAX_POSITION:
            _add_error(self.snap.errors, f"spec-decode position {pos} out of range, ignored")
            return
        per_pos = self.snap.per_position_accepted
        per_pos[pos] = per_pos.get(pos, 0.0) + value

    def _resolve(self) -> None:
        snap = self.snap
        for canon, value in _best(_link_groups(self.counters)).items():
            snap.counters[canon] = value
        for canon, values in _best(self.gauges).items():
            gauge = _combine_gauge(canon, values)
            if gauge is not None:
                snap.gauges[canon] = gauge
        for canon, acc in _best(self.hists).items():
            buckets = sorted(acc["buckets"].items())
            snap.histograms[canon] = Histogram(buckets, acc["sum"], acc["count"])
        snap.present = set(snap.counters) | set(snap.gauges) | set(snap.histograms)
        if snap.per_position_accepted:
            snap.present.add("spec_per_position")
        if snap.cache_config:
            snap.present.add("cache_config")
        snap.model_names = sorted(self.models)
        snap.engines = sorted(self.engines, key=_engine_key)


def _best(acc: dict[tuple[str, int], Any]) -> dict[str, Any]:
    """For each canonical name keep the value of the lowest priority (= newest name) seen."""
    chosen: dict[str, tuple[int, Any]] = {}
    for (canon, prio), value in acc.items():
        if canon not in chosen or prio < chosen[canon][0]:
            chosen[canon] = (prio, value)
    return {canon: value for canon, (_, value) in chosen.items()}


def _link_groups(acc: dict[tuple[str, int], float]) -> dict[tuple[str, int], float]:
    """Take each linked group (e.g. prefix-cache queries + hits) from one naming generation.

    The V1-early `gpu_prefix_cache_*` counters count blocks, their successors count tokens
    (INDEX.md "Prefix cache"), so a hit rate must never mix the two.
    """
    out = dict(acc)
    for group in LINKED_COUNTERS:
        prios = [prio for (canon, prio) in acc if canon in group]
        if prios:
            best = min(prios)
            for key in [k for k in out if k[0] in group and k[1] != best]:
                del out[key]
    return out


def _combine_gauge(canon: str, values: list[float]) -> float | None:
    if canon == "prefix_cache_hit_rate":
        # V0 reports -1 when prefix caching is disabled: that is "no value", not a rate.
        values = [v for v in values if v >= 0]
    if not values:
        return None
    if canon in GAUGE_MEAN:
        return sum(values) / len(values)
    return sum(values)


def _engine_key(engine: str) -> tuple[int, str]:
    try:
        return (int(engine), "")
    except ValueError:  # non-numeric or absurdly long engine labels sort after real ones
        return (1 << 30, engine)
