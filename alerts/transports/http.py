"""What the HTTP transports (Slack, webhook) share: destination checks and the POST.

Outbound requests never go to private, loopback, link-local or otherwise
non-public addresses unless ``settings.ALERTS_ALLOW_PRIVATE_WEBHOOKS`` is true
(SSRF: a channel URL must not reach the database, Redis or a cloud metadata
endpoint). The check runs when the channel is saved and again before each send,
because DNS answers change. Redirects are never followed, for the same reason.
"""

from __future__ import annotations

import email.utils
import ipaddress
import socket
from datetime import UTC, datetime
from urllib.parse import urlsplit

import httpx
from django.conf import settings

from alerts.transports import TransportError

#: Seconds for connect/read/write of one alert POST (settings ALERT_HTTP_TIMEOUT_S).
DEFAULT_HTTP_TIMEOUT_S = 10.0
#: Response codes worth retrying besides 5xx: request timeout and rate limiting.
TRANSIENT_CODES = frozenset({408, 425, 429})


def allow_private() -> bool:
    """True when settings allow webhook destinations on private/loopback addresses."""
    return bool(getattr(settings, "ALERTS_ALLOW_PRIVATE_WEBHOOKS", False))


def validate_url(url: str) -> str:
    """Return ``url`` stripped if it is an http(s) URL to a public address.

    Raises ValueError with the reason (bad scheme, no host, unresolvable, private).
    """
    url = url.strip()
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// URL with a host name")
    if not allow_private():
        check_public(parts.hostname, parts.port or (443 if parts.scheme == "https" else 80))
    return url


def check_public(hostname: str, port: int) -> None:
    """Raise ValueError unless every address ``hostname`` resolves to is public."""
    try:
        infos = socket.getaddrinfo(hostname, port, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError) as exc:
        raise ValueError(f"cannot resolve {hostname}: {exc}") from None
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%")[0])
        if not address.is_global or address.is_multicast:
            raise ValueError(
                f"{hostname} resolves to the non-public address {address}; set "
                "ALERTS_ALLOW_PRIVATE_WEBHOOKS=true to allow private destinations")


def post(url: str, body: bytes, headers: dict[str, str]) -> httpx.Response:
    """POST ``body`` to ``url`` once, with timeouts and no redirects.

    Returns the 2xx response. Raises TransportError: permanent for refused
    destinations, redirects and 4xx other than 408/425/429; transient (with
    ``retry_after`` when the receiver sent one) for timeouts, connection errors,
    408/425/429 and 5xx.
    """
    try:
        validate_url(url)
    except ValueError as exc:
        raise TransportError(f"destination refused: {exc}", permanent=True) from None
    timeout = float(getattr(settings, "ALERT_HTTP_TIMEOUT_S", DEFAULT_HTTP_TIMEOUT_S))
    try:
        with httpx.Client(timeout=timeout, follow_redirects=False) as client:
            response = client.post(url, content=body, headers=headers)
    except httpx.TimeoutException as exc:
        raise TransportError(f"timed out after {timeout:g} s: {exc!r}") from None
    except httpx.HTTPError as exc:
        raise TransportError(f"connection failed: {exc!r}") from None
    if response.is_success:
        return response
    raise classify_failure(response)


def classify_failure(response: httpx.Response) -> TransportError:
    """Map a non-2xx response to a TransportError (see :func:`post`)."""
    code = response.status_code
    snippet = response.text[:300].strip()
    reason = f"HTTP {code}" + (f": {snippet}" if snippet else "")
    if code in TRANSIENT_CODES or code >= 500:
        return TransportError(reason, status_code=code,
                              retry_after=parse_retry_after(response.headers.get("Retry-After")))
    if 300 <= code < 400:
        reason += " (redirects are not followed; use the final URL)"
    return TransportError(reason, permanent=True, status_code=code)


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or HTTP date), or None.

    RFC 9110 section 10.2.3; negative or unparsable values give None.
    """
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    delta = (when - datetime.now(UTC)).total_seconds()
    return delta if delta >= 0 else None
