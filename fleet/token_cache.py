"""Process-local cache of the ingest's bearer-token lookup.

Every report used to cost one query joining the token, its host and its enrollment secret
(~7 ms of a 27 ms request on a loaded machine). A live token found in the database is now
kept here with its host and whether the host has an enabled live-probe policy,
so a steady agent costs a Redis ``GET`` per report instead of that query.

**Revocation latency.** An entry is used only while the shared *token epoch* (one counter
in Django's cache, i.e. Redis) still has the value read before the entry was looked up.
Saving or deleting a token, a secret, a host or a probe policy bumps the epoch once the
transaction commits (``post_save``/``post_delete`` receivers), so revoking a token or a
secret, approving a re-enrollment (which revokes the older tokens) or deleting a host
takes effect at the next request in every web worker. Changes that send no signal
(``QuerySet.update``, SQL by hand) are bounded by ``INGEST_TOKEN_CACHE_S`` (default 300 s;
0 turns the cache off). When the cache (Redis) does not answer, nothing is cached: every
request asks the database, as before. Unknown, revoked and pending tokens are never cached
(a refusal always asks the database), so a re-enrolled host's new token works at once.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import transaction

from fleet import ratelimit

log = logging.getLogger(__name__)

#: Most entries kept (one per live token used through this process); past it the cache is
#: emptied and refilled. 50,000 entries of ~2 KB stay under 100 MB for a 10,000-host fleet.
MAX_ENTRIES = 50_000
#: The shared counter (Django cache key) every worker compares its entries with.
EPOCH_KEY = "ingest-token-epoch"

#: sha256 of the token -> (monotonic expiry, epoch, AgentToken with ``host``, ``has_probes``).
_entries: dict[str, tuple[float, int, Any]] = {}


def current_epoch() -> int | None:
    """The shared token epoch, or None when the cache does not answer."""
    try:
        if ratelimit.uses_redis():  # one GET on the process's client (no client per call)
            return int(ratelimit.redis_client().get(cache.make_and_validate_key(EPOCH_KEY))
                       or 0)
        return int(cache.get(EPOCH_KEY) or 0)
    except Exception as exc:  # noqa: BLE001 - any cache backend error: no caching then
        log.warning("token cache epoch unavailable, looking tokens up: %s", exc)
        return None


def live_or_pending(plaintext: str, now: float | None = None) -> Any | None:
    """The unrevoked token (live or pending) for ``plaintext`` with its ``host`` loaded and
    ``has_probes`` (bool: the host has an enabled ``ProbePolicy``), or None.

    Same answer as :meth:`fleet.models.AgentToken.lookup`, from this process's cache while
    the token epoch is unchanged and the entry is younger than ``INGEST_TOKEN_CACHE_S``.
    """
    from fleet.models import AgentToken, sha256_hex

    if settings.INGEST_TOKEN_CACHE_S <= 0:
        return AgentToken.lookup(plaintext)
    digest = sha256_hex(plaintext)
    return _cached(plaintext, digest, current_epoch(), now)


def for_ingest(plaintext: str) -> tuple[Any | None, float | None]:
    """``(live_or_pending(plaintext), seconds the report must wait)``: with Redis, the
    epoch and the ingest rate limit of the token (``fleet.ratelimit``, keyed by its sha256)
    are one round trip instead of two. The wait is None when it was not asked (no Redis, or
    no cache): the caller then checks the rate itself once the token is known. Counting a
    request before the token is known costs nothing: an unknown token's key is its own."""
    from fleet.models import AgentToken, sha256_hex

    digest = sha256_hex(plaintext)
    if settings.INGEST_TOKEN_CACHE_S <= 0:
        return AgentToken.lookup(plaintext), None
    try:
        both = ratelimit.check_rate_and_read(digest[:32], EPOCH_KEY)
    except Exception as exc:  # noqa: BLE001 - any cache error: as check_rate and current_epoch
        log.warning("rate limit and token epoch unavailable: %s", exc)
        return _cached(plaintext, digest, None, None), 0.0
    if both is None:
        return _cached(plaintext, digest, current_epoch(), None), None
    wait, epoch = both
    return _cached(plaintext, digest, int(epoch or 0), None), wait


def _cached(plaintext: str, digest: str, epoch: int | None, now: float | None) -> Any | None:
    """The token from this process's cache when its entry was stored at ``epoch`` (read
    before any lookup: a later revocation bumps it) and has not expired; else looked up and
    kept. ``epoch`` None: the cache did not answer, nothing is kept."""
    from fleet.models import AgentToken

    ttl = settings.INGEST_TOKEN_CACHE_S
    now = time.monotonic() if now is None else now
    hit = _entries.get(digest)
    if hit is not None and hit[0] > now and epoch is not None and hit[1] == epoch:
        return hit[2]
    token = AgentToken.lookup(plaintext)
    if token is None or token.pending or epoch is None:
        _entries.pop(digest, None)
        return token
    if len(_entries) >= MAX_ENTRIES:
        _entries.clear()
    _entries[digest] = (now + ttl, epoch, token)
    return token


def forget(digest: str) -> None:
    """Drop one token (by its sha256) from this process's cache."""
    _entries.pop(digest, None)


def forget_all() -> None:
    """Empty this process's cache."""
    _entries.clear()


def bump_epoch() -> None:
    """Invalidate every worker's entries (now in this process, at the next request in the
    others). A cache error is logged: the entries then expire within the TTL."""
    _entries.clear()
    try:
        cache.add(EPOCH_KEY, 0, timeout=None)
        cache.incr(EPOCH_KEY)
    except Exception as exc:  # noqa: BLE001 - any cache backend error
        log.warning("token cache epoch not bumped (entries expire within %s s): %s",
                    settings.INGEST_TOKEN_CACHE_S, exc)


def _changed(**_signal_kwargs: Any) -> None:
    # After the commit: a worker that read the old epoch before it then finds the change
    # in the database; bumping before the commit could let one cache the old row anew.
    _entries.clear()
    transaction.on_commit(bump_epoch)


def _probe_policy_saved(update_fields: Any = None, **kwargs: Any) -> None:
    # fleet.probes saves ``last_requested`` on every report of a probed host: that does not
    # change whether the host has a policy, so it must not invalidate every cache each time.
    if update_fields is not None and set(update_fields) == {"last_requested"}:
        return
    _changed()


def connect_signals() -> None:
    """Bump the epoch when a token, secret, host or probe policy changes (``FleetConfig``)."""
    from django.db.models.signals import post_delete, post_save

    from fleet.models import AgentToken, EnrollmentSecret, Host, ProbePolicy

    for model in (AgentToken, EnrollmentSecret):
        post_save.connect(_changed, sender=model, dispatch_uid=f"token-cache-{model.__name__}")
    # A host's identity does not change when the worker updates it; its deletion does.
    for model in (AgentToken, EnrollmentSecret, Host, ProbePolicy):
        post_delete.connect(_changed, sender=model,
                            dispatch_uid=f"token-cache-del-{model.__name__}")
    post_save.connect(_probe_policy_saved, sender=ProbePolicy, dispatch_uid="token-cache-probes")
