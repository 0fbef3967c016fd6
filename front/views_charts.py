"""Chart data for the host page: server-side downsampling of metric and GPU samples.

Samples are grouped into time buckets in SQL (``floor(epoch / bucket)``), so a 7-day
window ships at most :data:`MAX_POINTS` points per series however many samples exist.
Gauges and medians are averaged per bucket, p99 latencies and preemptions take the
bucket maximum (a spike must survive downsampling). A null value stays null (the
exposition lacked it) and a hole in time longer than 2.5 sampling intervals becomes a
null point, so Chart.js draws a gap instead of a line through missing data.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Avg, F, FloatField, Func, Max, QuerySet, Value

from fleet.models import GpuSample, MetricSample

#: Selectable chart windows, in seconds.
WINDOWS = {"1h": 3600, "24h": 86400, "7d": 7 * 86400}
DEFAULT_WINDOW = "24h"
#: Most points one series may carry to the browser.
MAX_POINTS = 300

#: MetricSample column -> aggregate used when several samples share a bucket.
METRIC_AGGREGATES = {
    "kv_cache_usage": Avg, "requests_running": Avg, "requests_waiting": Avg,
    "generation_tps": Avg, "prompt_tps": Avg, "ttft_p50_s": Avg, "ttft_p99_s": Max,
    "tpot_p50_s": Avg, "tpot_p99_s": Max, "preemptions": Max,
    "spec_acceptance_rate": Avg, "spec_mean_acceptance_length": Avg,
}
GPU_AGGREGATES = {"memory_used_bytes": Avg, "power_draw_w": Avg, "utilization_pct": Avg,
                  "temperature_c": Max}


def bucket_seconds(window_s: int) -> int:
    """Bucket width in seconds so a window holds at most :data:`MAX_POINTS` buckets."""
    return max(1, math.ceil(window_s / MAX_POINTS))


class EpochBucket(Func):
    """``floor(epoch seconds of ts / bucket)`` on PostgreSQL, integer division of
    ``strftime('%s')`` on SQLite (the embedded demo). Both operands are compiled
    expressions with bound parameters; no SQL is built from input."""

    output_field = FloatField()

    def _parts(self, compiler: Any) -> tuple[str, str, list[Any]]:
        ts_sql, ts_params = compiler.compile(self.source_expressions[0])
        b_sql, b_params = compiler.compile(self.source_expressions[1])
        return ts_sql, b_sql, [*ts_params, *b_params]

    def as_sql(self, compiler: Any, connection: Any, **extra: Any) -> tuple[str, list]:
        ts_sql, b_sql, params = self._parts(compiler)
        return f"floor(extract(epoch from {ts_sql}) / {b_sql})", params

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> tuple[str, list]:
        ts_sql, b_sql, params = self._parts(compiler)
        # '%%s' survives the backend's %-style placeholder conversion as strftime's '%s'.
        return f"(cast(strftime('%%s', {ts_sql}) as integer) / {b_sql})", params


def _bucketed(qs: QuerySet, group: str, aggregates: dict[str, Any],
              bucket_s: int) -> list[dict[str, Any]]:
    bucket = EpochBucket(F("ts"), Value(bucket_s))
    return list(qs.annotate(bucket=bucket).order_by()
                .values(group, "bucket")
                .annotate(**{f"v_{k}": agg(k) for k, agg in aggregates.items()})
                .order_by(group, "bucket"))


def _series(rows: Iterable[dict[str, Any]], key: str, bucket_s: int, gap_s: float,
            scale: float = 1.0) -> list[list[float | None]]:
    """``[[epoch_ms, value|None], ...]`` with a null point inserted across time holes."""
    out: list[list[float | None]] = []
    previous = None
    for row in rows:
        x = float(row["bucket"]) * bucket_s
        if previous is not None and x - previous > gap_s:
            out.append([(previous + bucket_s) * 1000, None])
        value = row[f"v_{key}"]
        out.append([x * 1000, None if value is None else round(value * scale, 4)])
        previous = x
    return out


def server_series(server_ids: list[int], start: datetime, window_s: int,
                  interval_s: int) -> dict[int, dict[str, list]]:
    """Per server id: ``{column: [[epoch_ms, value|None], ...]}`` for every column of
    :data:`METRIC_AGGREGATES` (one query for all servers). KV usage in percent."""
    bucket = bucket_seconds(window_s)
    gap = 2.5 * max(bucket, interval_s)
    rows = _bucketed(MetricSample.objects.filter(server_id__in=server_ids, ts__gte=start),
                     "server_id", METRIC_AGGREGATES, bucket)
    grouped: dict[int, list[dict]] = defaultdict(list)
    for row in rows:
        grouped[row["server_id"]].append(row)
    # Fractions as %, latencies as ms (a TPOT of 0.0175 s reads as 17.5 ms, and
    # sub-millisecond values survive the 4-decimal rounding of _series).
    scale = {"kv_cache_usage": 100.0, "spec_acceptance_rate": 100.0, "ttft_p50_s": 1000.0,
             "ttft_p99_s": 1000.0, "tpot_p50_s": 1000.0, "tpot_p99_s": 1000.0}
    return {sid: {k: _series(r, k, bucket, gap, scale.get(k, 1.0)) for k in METRIC_AGGREGATES}
            for sid, r in grouped.items()}


def gpu_series(gpu_ids: list[int], start: datetime, window_s: int,
               interval_s: int) -> dict[int, dict[str, list]]:
    """Per GPU id: memory used (GiB), power (W), utilisation (%), temperature (°C)."""
    bucket = bucket_seconds(window_s)
    gap = 2.5 * max(bucket, interval_s)
    rows = _bucketed(GpuSample.objects.filter(gpu_id__in=gpu_ids, ts__gte=start), "gpu_id",
                     GPU_AGGREGATES, bucket)
    grouped: dict[int, list[dict]] = defaultdict(list)
    for row in rows:
        grouped[row["gpu_id"]].append(row)
    scale = {"memory_used_bytes": 1 / 2**30}
    return {gid: {k: _series(r, k, bucket, gap, scale.get(k, 1.0)) for k in GPU_AGGREGATES}
            for gid, r in grouped.items()}


#: Chart id -> (title, unit, [(column, label)], canonical metric names it needs).
#: The metric names are those of audit/kb/metrics_names.py (MetricSample.extra["missing"]).
SERVER_CHARTS: tuple[tuple[str, str, str, list[tuple[str, str]], tuple[str, ...]], ...] = (
    ("kv", "KV cache usage", "%", [("kv_cache_usage", "KV cache")], ("kv_cache_usage",)),
    ("requests", "Requests", "requests",
     [("requests_running", "running"), ("requests_waiting", "waiting")],
     ("requests_running", "requests_waiting")),
    ("throughput", "Generation throughput", "tok/s",
     [("generation_tps", "generation"), ("prompt_tps", "prompt")], ("generation_tokens",)),
    ("ttft", "Time to first token", "ms", [("ttft_p50_s", "p50"), ("ttft_p99_s", "p99")],
     ("ttft",)),
    ("tpot", "Time per output token", "ms", [("tpot_p50_s", "p50"), ("tpot_p99_s", "p99")],
     ("tpot",)),
    ("spec", "Draft acceptance rate", "%", [("spec_acceptance_rate", "acceptance")],
     ("spec_drafts", "spec_draft_tokens", "spec_accepted_tokens")),
    ("preempt", "Preemptions per interval", "preemptions", [("preemptions", "preemptions")],
     ("preemptions",)),
)

#: Words for a metric family the exposition does not have (shown instead of a flat zero).
MISSING_WORDS = {
    "ttft": "no TTFT data: this vLLM version does not expose it",
    "tpot": "no TPOT data: this vLLM version does not expose it",
    "kv": "no KV-cache data: this vLLM version does not expose it",
    "requests": "no request-queue data: this vLLM version does not expose it",
    "throughput": "no token counters: this vLLM version does not expose them",
    "spec": "no speculative-decoding counters: the server does not expose them "
            "(no speculator configured, or an older vLLM)",
    "preempt": "no preemption counter: this vLLM version does not expose it",
}


def server_charts(server_id: int, series: dict[str, list], missing: list[str],
                  baseline: dict[str, Any] | None, has_spec: bool) -> list[dict[str, Any]]:
    """Chart specs for one server: id, title, unit, datasets, baseline and a note in
    words when the data is missing. A spec chart appears only for a speculating server."""
    charts = []
    for key, title, unit, columns, needs in SERVER_CHARTS:
        if key == "spec" and not has_spec:
            continue
        datasets = [{"label": label, "data": series.get(col, [])} for col, label in columns]
        has_values = any(p[1] is not None for d in datasets for p in d["data"])
        absent = any(name in (missing or []) for name in needs)
        note = MISSING_WORDS[key] if absent else None
        if not has_values:
            note = note or "no data in this window"
        # With values, the canvas is drawn and the note (if any) says the newest scrape
        # lacks the metric, so the flat end of the line is not read as zero.
        chart = {"id": f"s{server_id}-{key}", "title": title, "unit": unit,
                 "datasets": datasets, "note": note, "baseline": None,
                 "draw": has_values}
        if key == "spec" and baseline:
            rate = baseline.get("acceptance_rate")
            chart["baseline"] = None if rate is None else round(rate * 100, 2)
            chart["baseline_label"] = baseline.get("label")
        charts.append(chart)
    return charts


def gpu_charts(gpus: list[Any], series: dict[int, dict[str, list]]) -> list[dict[str, Any]]:
    """Two host charts: GPU memory used (GiB) and power (W), one line per GPU."""
    charts = []
    for key, title, unit, column in (("gpumem", "GPU memory used", "GiB", "memory_used_bytes"),
                                     ("gpupower", "GPU power", "W", "power_draw_w")):
        datasets = [{"label": f"GPU{g.index}", "data": series.get(g.pk, {}).get(column, [])}
                    for g in gpus]
        has_values = any(p[1] is not None for d in datasets for p in d["data"])
        charts.append({"id": f"host-{key}", "title": title, "unit": unit, "datasets": datasets,
                       "baseline": None, "draw": has_values,
                       "note": None if has_values else "no GPU samples in this window"})
    return charts


def window_bounds(name: str, now: datetime,
                  default: str = DEFAULT_WINDOW) -> tuple[str, int, datetime]:
    """``(window name, seconds, start)`` for a requested window (``default`` if none)."""
    name = name if name in WINDOWS else default
    return name, WINDOWS[name], now - timedelta(seconds=WINDOWS[name])
