"""Turn a server's /metrics scrapes into :class:`fleet.models.MetricSample` rows.

The one place fleet calls ``audit.kb.metrics`` (``parse`` and ``window``, API in
AUDIT-INTERFACES.md): the window is the delta between two consecutive scrapes of
the same process, or the process lifetime after a restart (``prev=None``).
"""

from __future__ import annotations

import logging
import math
from datetime import datetime
from typing import Any

from fleet.models import MetricSample, Report, Server

log = logging.getLogger(__name__)

#: window() keys stored as MetricSample columns; everything else JSON-able goes to ``extra``.
COLUMNS = (
    "window_s", "kv_cache_usage", "requests_running", "requests_waiting", "generation_tps",
    "prompt_tps", "ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "itl_p50_s",
    "itl_p99_s", "preemptions", "prefix_cache_hit_rate", "spec_acceptance_rate",
    "spec_mean_acceptance_length",
)


def _finite(value: Any) -> float | None:
    """A float column value: None for missing, NaN or infinite (JSON and SQL cannot hold them)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def derive_window(prev_text: str | None, cur_text: str,
                  elapsed_s: float | None) -> dict[str, Any] | None:
    """Derived values for one interval, or None when the metrics library is unavailable.

    ``prev_text`` is the previous /metrics body of the SAME process (None after a
    restart or on first sight), ``elapsed_s`` the seconds between the two scrapes.
    """
    try:
        from audit.kb import metrics
    except ImportError:  # pragma: no cover - only while audit.kb.metrics is being written
        # TODO(lead): audit/kb/metrics.py (metrics helper) provides parse()/window();
        # until it exists no MetricSample is derived.
        log.warning("audit.kb.metrics not available; metric samples skipped")
        return None
    prev = metrics.parse(prev_text) if prev_text else None
    return metrics.window(prev, metrics.parse(cur_text), elapsed_s)


def record_sample(server: Server, report: Report, cur_text: str, scraped_at: datetime,
                  same_process: bool) -> MetricSample | None:
    """Derive and store one MetricSample for ``server`` from its newest scrape.

    ``same_process`` False (restart, first sight) makes the window the lifetime.
    Updates ``server.last_metrics_text/at`` (saved by the caller). Never raises on
    a bad exposition: the library reports problems in the window's ``errors``.
    """
    prev_text = server.last_metrics_text if same_process and server.last_metrics_text else None
    elapsed = None
    if prev_text and server.last_metrics_at:
        elapsed = (scraped_at - server.last_metrics_at).total_seconds()
        if elapsed <= 0:  # clock went backwards or duplicate scrape: no delta possible
            prev_text, elapsed = None, None
    window = derive_window(prev_text, cur_text, elapsed)
    server.last_metrics_text, server.last_metrics_at = cur_text, scraped_at
    if window is None:
        return None
    values = {key: _finite(window.get(key)) for key in COLUMNS}
    extra = {k: _jsonable(v) for k, v in window.items()
             if k not in COLUMNS and k != "window_kind"}
    return MetricSample.objects.create(
        server=server, report=report, ts=scraped_at,
        window_kind=str(window.get("window_kind") or ""), extra=extra, **values)
