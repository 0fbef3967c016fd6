"""Per-token ingest rate limit: a token bucket kept in Django's cache.

Implemented as GCRA (the "generic cell rate algorithm", a token bucket that
stores one timestamp per key): sustained ``INGEST_RATE`` (default 1 report per
5 s) with up to ``INGEST_BURST`` reports back to back. The cache is Redis when
``REDIS_URL`` is set (shared by all web workers), per-process memory otherwise.

With Redis, the read and the write are one Lua script (:data:`_GCRA_LUA`): one round trip
per request instead of a GET and a SET (~3 ms of a loaded ingest request), and
atomic, so two simultaneous requests of one token no longer both pass. The per-process
fallback reads then writes; there a race lets both pass: the limit protects the server from
a runaway agent, not a race.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

from django.conf import settings
from django.core.cache import cache, caches
from django.core.cache.backends.redis import RedisCache

log = logging.getLogger(__name__)

#: GCRA in one Redis call. KEYS[1]: the limiter key. ARGV: now (s), interval (s), tolerance
#: (s), consume ("1"/"0"), expiry (whole s). Returns the seconds to wait as a string ("0":
#: allowed). A value that is not a number (one pickled by Django's cache serializer before
#: this script) counts as no earlier request.
_GCRA_LUA = """
local now = tonumber(ARGV[1])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if tat < now then tat = now end
local wait = tat - tonumber(ARGV[3]) - now
if wait > 0 then return tostring(wait) end
if ARGV[4] == '1' then
  redis.call('SET', KEYS[1], string.format('%.6f', tat + tonumber(ARGV[2])), 'EX', ARGV[5])
end
return '0'
"""

#: :data:`_GCRA_LUA` that also reads KEYS[2] (the ingest's token epoch) in the same round
#: trip. Returns ``{wait, value of KEYS[2] or nil}``.
_GCRA_READ_LUA = """
local now = tonumber(ARGV[1])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if tat < now then tat = now end
local wait = tat - tonumber(ARGV[3]) - now
local read = redis.call('GET', KEYS[2])
if wait > 0 then return {tostring(wait), read} end
if ARGV[4] == '1' then
  redis.call('SET', KEYS[1], string.format('%.6f', tat + tonumber(ARGV[2])), 'EX', ARGV[5])
end
return {'0', read}
"""

_client: Any = None
_script: Any = None
_read_script: Any = None


def redis_client() -> Any:
    """The cache's Redis client (Django's ``RedisCache``; its connection pool), kept for the
    process: ``cache.get``/``set`` build a new ``redis.Redis`` on every call (~0.3 ms)."""
    global _client
    if _client is None:
        _client = caches["default"]._cache.get_client(write=True)
    return _client


def _redis_wait(cache_key: str, now: float, interval: float, tolerance: float,
                consume: bool, expiry_s: int) -> float:
    """Seconds to wait for ``cache_key`` through the Lua script on the cache's Redis."""
    global _script
    client = redis_client()
    if _script is None:
        _script = client.register_script(_GCRA_LUA)
    key = cache.make_and_validate_key(cache_key)
    args = [repr(now), repr(interval), repr(tolerance), "1" if consume else "0", expiry_s]
    return float(_script(keys=[key], args=args, client=client))


def _cache_wait(cache_key: str, now: float, interval: float, tolerance: float,
                consume: bool, expiry_s: int) -> float:
    """The same with a get then a set (any other cache backend: per-process memory)."""
    tat = max(float(cache.get(cache_key) or 0.0), now)  # theoretical arrival time
    if tat - now > tolerance:
        return tat - tolerance - now
    if consume:
        cache.set(cache_key, tat + interval, timeout=expiry_s)
    return 0.0


def _gcra(rate: tuple[int, float] | None, burst: int | None) -> tuple[float, float, int]:
    """``(interval s, tolerance s, key expiry s)`` of ``rate`` (events, per seconds) and
    ``burst``, defaulting to ``INGEST_RATE``/``INGEST_BURST``."""
    events, period_s = rate or settings.INGEST_RATE
    interval = period_s / events
    tolerance = interval * ((burst or settings.INGEST_BURST) - 1)
    return interval, tolerance, math.ceil(tolerance + interval) + 1


def check_rate(key: str, now: float | None = None, rate: tuple[int, float] | None = None,
               burst: int | None = None, consume: bool = True) -> float:
    """Count one request for ``key``; returns 0 if allowed, else seconds to wait.

    ``rate`` (events, per seconds) and ``burst`` default to ``INGEST_RATE``/``INGEST_BURST``
    (enrollment passes ``ENROLL_RATE``/``ENROLL_BURST``). A refused request does not consume
    capacity; ``consume=False`` only asks whether a request would pass now.
    """
    interval, tolerance, expiry_s = _gcra(rate, burst)
    now = time.time() if now is None else now
    cache_key = f"ingest-rate:{key}"
    wait = _redis_wait if uses_redis() else _cache_wait
    try:
        return wait(cache_key, now, interval, tolerance, consume, expiry_s)
    except Exception as exc:  # noqa: BLE001 - any cache backend error
        # Redis (the cache) is down: storing the report matters more than limiting it,
        # so the limiter fails open (reports are still accepted while Redis is down).
        log.warning("rate-limit cache unavailable, request allowed: %s", exc)
    return 0.0


def check_rate_and_read(key: str, read_key: str) -> tuple[float, Any] | None:
    """:func:`check_rate` of ``key`` with the ingest's rate, and the raw Redis value of the
    cache key ``read_key`` (bytes, None when absent), in one round trip; None when the cache
    is not Redis (the caller then asks each the usual way). Raises redis-py's errors, so a
    caller can fail open as :func:`check_rate` does."""
    global _read_script
    if not uses_redis():
        return None
    interval, tolerance, expiry_s = _gcra(None, None)
    client = redis_client()
    if _read_script is None:
        _read_script = client.register_script(_GCRA_READ_LUA)
    keys = [cache.make_and_validate_key(f"ingest-rate:{key}"),
            cache.make_and_validate_key(read_key)]
    args = [repr(time.time()), repr(interval), repr(tolerance), "1", expiry_s]
    wait, value = _read_script(keys=keys, args=args, client=client)
    return float(wait), value


def uses_redis() -> bool:
    """True when Django's cache is Redis (``REDIS_URL`` set)."""
    return isinstance(caches["default"], RedisCache)
