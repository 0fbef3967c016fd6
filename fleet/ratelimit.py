"""Per-token ingest rate limit: a token bucket kept in Django's cache.

Implemented as GCRA (the "generic cell rate algorithm", a token bucket that
stores one timestamp per key): sustained ``INGEST_RATE`` (default 1 report per
5 s) with up to ``INGEST_BURST`` reports back to back. The cache is Redis when
``REDIS_URL`` is set (shared by all web workers), per-process memory otherwise.
The read-then-write is not atomic, so two simultaneous requests of one token can
both pass: the limit protects the server from a runaway agent, not a race.
"""

from __future__ import annotations

import logging
import math
import time

from django.conf import settings
from django.core.cache import cache

log = logging.getLogger(__name__)


def check_rate(key: str, now: float | None = None, rate: tuple[int, float] | None = None,
               burst: int | None = None, consume: bool = True) -> float:
    """Count one request for ``key``; returns 0 if allowed, else seconds to wait.

    ``rate`` (events, per seconds) and ``burst`` default to ``INGEST_RATE``/``INGEST_BURST``
    (enrollment passes ``ENROLL_RATE``/``ENROLL_BURST``). A refused request does not consume
    capacity; ``consume=False`` only asks whether a request would pass now.
    """
    events, period_s = rate or settings.INGEST_RATE
    interval = period_s / events
    tolerance = interval * ((burst or settings.INGEST_BURST) - 1)
    now = time.time() if now is None else now
    cache_key = f"ingest-rate:{key}"
    try:
        tat = max(float(cache.get(cache_key) or 0.0), now)  # theoretical arrival time
        if tat - now > tolerance:
            return tat - tolerance - now
        if consume:
                cache.set(cache_key, tat + interval,
                          timeout=math.ceil(tolerance + interval) + 1)
    except Exception as exc:  # noqa: BLE001 - any cache backend error
        # Redis (the cache) is down: storing the report matters more than limiting it,
        # so the limiter fails open (issue 8: reports are still accepted while Redis is down).
        log.warning("rate-limit cache unavailable, request allowed: %s", exc)
    return 0.0
