"""Process-local cache of the ingest's bearer-token lookup (issue 14).

Every report used to cost one query joining the token, its host and its enrollment secret
(~7 ms of a 27 ms request on a loaded machine). A live token found in the database is now
kept here for ``INGEST_TOKEN_CACHE_S`` seconds (default 5; 0 turns the cache off), with its
host and whether the host has an enabled live-probe policy (issue 17), so a steady agent
costs one lookup per web worker per few seconds instead of one per report.

**Revocation latency**: revoking a token or a secret, approving a re-enrollment (which
revokes the older tokens), deleting a host or changing a probe policy takes effect at once
in the process that saved it (``post_save``/``post_delete`` empty this process's cache) and
within ``INGEST_TOKEN_CACHE_S`` seconds in every other web worker. Bulk updates that send no
signal (``QuerySet.update``) are bounded the same way. Unknown, revoked and pending tokens
are never cached (a refusal always asks the database), so a re-enrolled host's new token
works at once.
"""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings

#: Most entries kept (one per live token used through this process); past it the cache is
#: emptied and refilled. 50,000 entries of ~2 KB stay under 100 MB for a 10,000-host fleet.
MAX_ENTRIES = 50_000

#: sha256 of the token -> (monotonic expiry, AgentToken with ``host`` and ``has_probes``).
_entries: dict[str, tuple[float, Any]] = {}


def live_or_pending(plaintext: str, now: float | None = None) -> Any | None:
    """The unrevoked token (live or pending) for ``plaintext`` with its ``host`` loaded and
    ``has_probes`` (bool: the host has an enabled ``ProbePolicy``), or None.

    Same answer as :meth:`fleet.models.AgentToken.lookup`, up to ``INGEST_TOKEN_CACHE_S``
    seconds old for a live token (see the module docstring).
    """
    from fleet.models import AgentToken, sha256_hex

    digest = sha256_hex(plaintext)
    now = time.monotonic() if now is None else now
    hit = _entries.get(digest)
    if hit is not None and hit[0] > now:
        return hit[1]
    token = AgentToken.lookup(plaintext)
    ttl = settings.INGEST_TOKEN_CACHE_S
    if token is None or token.pending or ttl <= 0:
        _entries.pop(digest, None)
        return token
    if len(_entries) >= MAX_ENTRIES:
        _entries.clear()
    _entries[digest] = (now + ttl, token)
    return token


def forget(digest: str) -> None:
    """Drop one token (by its sha256) from this process's cache."""
    _entries.pop(digest, None)


def forget_all(**_signal_kwargs: Any) -> None:
    """Empty this process's cache (a ``post_save``/``post_delete`` receiver)."""
    _entries.clear()


def _probe_policy_saved(update_fields: Any = None, **kwargs: Any) -> None:
    # fleet.probes saves ``last_requested`` on every report of a probed host: that does not
    # change whether the host has a policy, so it must not empty the cache each time.
    if update_fields is not None and set(update_fields) == {"last_requested"}:
        return
    forget_all()


def connect_signals() -> None:
    """Empty the cache when a token, secret, host or probe policy changes (``FleetConfig``)."""
    from django.db.models.signals import post_delete, post_save

    from fleet.models import AgentToken, EnrollmentSecret, Host, ProbePolicy

    for model in (AgentToken, EnrollmentSecret):
        post_save.connect(forget_all, sender=model, dispatch_uid=f"token-cache-{model.__name__}")
    # A host's identity does not change when the worker updates it; its deletion does.
    for model in (AgentToken, EnrollmentSecret, Host):
        post_delete.connect(forget_all, sender=model,
                            dispatch_uid=f"token-cache-del-{model.__name__}")
    post_save.connect(_probe_policy_saved, sender=ProbePolicy, dispatch_uid="token-cache-probes")
    post_delete.connect(forget_all, sender=ProbePolicy, dispatch_uid="token-cache-del-probes")
