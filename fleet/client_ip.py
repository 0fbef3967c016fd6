"""The client's IP address, one rule for every caller (enrollment rate limits, the pending
enrollment's ``requested_from``, the sign-in throttle).

With ``BEHIND_PROXY=true`` the dashboard is reached only through our proxy
(``deploy/Caddyfile`` sets ``X-Real-IP {remote_host}``, replacing whatever the client sent),
so that header is the client; failing it, the last ``X-Forwarded-For`` entry (the one the
proxy appended; earlier entries are whatever the client claimed). Without a proxy both headers
are client-controlled and ignored: ``REMOTE_ADDR`` is the client.
"""

from __future__ import annotations

import ipaddress

from django.conf import settings
from django.http import HttpRequest


def _ip(text: object) -> str | None:
    try:
        return str(ipaddress.ip_address(str(text).strip()))
    except ValueError:
        return None


def client_ip_or_none(request: HttpRequest | None) -> str | None:
    """The client's IP address (normalised, ``ipaddress`` form), or None when unknown."""
    if request is None:
        return None
    meta = request.META
    if getattr(settings, "BEHIND_PROXY", False):
        real = _ip(meta.get("HTTP_X_REAL_IP", ""))
        if real:
            return real
        forwarded = str(meta.get("HTTP_X_FORWARDED_FOR", "")).split(",")
        last = _ip(forwarded[-1])
        if last:
            return last
    return _ip(meta.get("REMOTE_ADDR", ""))


def client_ip(request: HttpRequest | None) -> str:
    """:func:`client_ip_or_none`, or ``"unknown"`` (one shared bucket for rate limits)."""
    return client_ip_or_none(request) or "unknown"
