"""Turn a server's /metrics scrapes into :class:`fleet.models.MetricSample` rows.

The one place fleet calls ``audit.kb.metrics`` (``parse`` and ``window``, API in
docs/knowledge-base.md): the window is the delta between two consecutive scrapes of
the same process, or the process lifetime after a restart (``prev=None``).
"""

from __future__ import annotations

import logging
import math
from datetime import datetime
from typing import Any

from audit.kb import metrics
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


def derive_window(prev: dict[str, Any] | None, scrape: dict[str, Any] | str,
                  elapsed_s: float | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(window, current snapshot as JSON)`` for one interval.

    ``scrape`` is the report's metrics block as JSON (``{"text", "compact"}``: the compact
    form when present, no text parse) or a bare /metrics text. ``prev`` is the stored
    snapshot (``MetricSnapshot.to_json``) of the previous scrape of the SAME process (None
    after a restart or on first sight), ``elapsed_s`` the seconds between the two scrapes.
    Keeping the previous scrape parsed halves the parsing per report (bench/ingest.py).
    """
    previous = None
    if prev:
        try:
            previous = metrics.MetricSnapshot.from_json(prev)
        except (KeyError, TypeError, ValueError):
            log.warning("stored metrics snapshot unreadable; using the lifetime window")
    if isinstance(scrape, str):
        current = metrics.parse(scrape)
    else:
        current = metrics.scrape_snapshot(scrape) or metrics.parse("")
    return metrics.window(previous, current, elapsed_s), current.to_json()


def sample_row(prev: dict[str, Any] | None, prev_at: datetime | None,
               scrape: dict[str, Any] | str, scraped_at: datetime) -> tuple[dict[str, Any],
                                                                           dict[str, Any]]:
    """``(MetricSample column values, new snapshot as JSON)`` for one scrape.

    ``prev``/``prev_at``: the stored snapshot of the previous scrape of the same process and
    when it was scraped (None after a restart or on first sight: the lifetime window).
    Column values are ``ts``, ``window_kind``, ``extra`` and :data:`COLUMNS` (floats or None).
    """
    elapsed = None
    if prev and prev_at:
        elapsed = (scraped_at - prev_at).total_seconds()
        if elapsed <= 0:  # clock went backwards or duplicate scrape: no delta possible
            prev, elapsed = None, None
    window, snapshot = derive_window(prev, scrape, elapsed)
    row = {key: _finite(window.get(key)) for key in COLUMNS}
    row["ts"] = scraped_at
    row["window_kind"] = str(window.get("window_kind") or "")
    row["extra"] = {k: _jsonable(v) for k, v in window.items()
                    if k not in COLUMNS and k != "window_kind"}
    return row, snapshot


def record_sample(server: Server, report: Report, scrape: dict[str, Any] | str,
                  scraped_at: datetime, same_process: bool) -> MetricSample:
    """Derive and store one MetricSample for ``server`` from its newest scrape (``scrape``
    as :func:`derive_window` takes it).

    ``same_process`` False (restart, first sight) makes the window the lifetime.
    Updates ``server.last_metrics_snapshot/at`` (saved by the caller). Never raises on
    a bad exposition: the library reports problems in the window's ``errors``.
    """
    prev = server.last_metrics_snapshot if same_process else None
    row, snapshot = sample_row(prev, server.last_metrics_at, scrape, scraped_at)
    server.last_metrics_snapshot, server.last_metrics_at = snapshot, scraped_at
    return MetricSample.objects.create(server=server, report=report, **row)
