"""What the HTTP transports (Slack, webhook) share: destination checks and the POST.

Outbound requests never go to private, loopback, link-local or otherwise
non-public addresses unless ``settings.ALERTS_ALLOW_PRIVATE_WEBHOOKS`` is true
(SSRF: a channel URL must not reach the database, Redis or a cloud metadata
endpoint). The check runs when the channel is saved and again before each send,
because DNS answers change; each send connects to the very address it checked (pinned,
see :func:`pinned_request`), and IPv6 forms that embed an IPv4 address (mapped, NAT64,
6to4, IPv4-compatible) are judged by that IPv4 address. Redirects are never followed.
"""

from __future__ import annotations

import email.utils
import ipaddress
import socket
import ssl
from datetime import UTC, datetime
from urllib.parse import urlsplit, urlunsplit

import httpx
from django.conf import settings

from alerts.transports import TransportError

#: Seconds for connect/read/write of one alert POST (settings ALERT_HTTP_TIMEOUT_S).
DEFAULT_HTTP_TIMEOUT_S = 10.0
#: Response codes worth retrying besides 5xx: request timeout and rate limiting.
TRANSIENT_CODES = frozenset({408, 425, 429})


#: Non-global ranges that ``ipaddress.is_global`` (Python 3.11) still calls global:
#: all of 192.0.0.0/24 (IETF protocol assignments, RFC 6890; 3.12 exempts .9 and .10) and
#: the local-use NAT64 prefix 64:ff9b:1::/48 (RFC 8215).
EXTRA_BLOCKED = (ipaddress.ip_network("192.0.0.0/24"), ipaddress.ip_network("64:ff9b:1::/48"))
#: IPv6 prefixes whose low 32 bits are an IPv4 address a gateway forwards to: NAT64
#: well-known prefix (RFC 6052) and the deprecated IPv4-compatible form ::a.b.c.d (RFC 4291).
NAT64 = ipaddress.ip_network("64:ff9b::/96")
IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
#: IPv4-translated addresses of SIIT (RFC 6145 section 2.1 / RFC 2765: ``::ffff:0:a.b.c.d``).
IPV4_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def allow_private() -> bool:
    """True when settings allow webhook destinations on private/loopback addresses."""
    return bool(getattr(settings, "ALERTS_ALLOW_PRIVATE_WEBHOOKS", False))


def embedded_ipv4(address: Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 form carries (mapped, NAT64, 6to4, IPv4-compatible), or None.

    ``::ffff:127.0.0.1``, ``64:ff9b::7f00:1``, ``2002:7f00:1::``, ``::7f00:1`` and
    ``::ffff:0:7f00:1`` all reach 127.0.0.1 through a dual-stack socket, a NAT64 gateway, a
    6to4 relay or a SIIT translator.
    """
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in NAT64 or address in IPV4_TRANSLATED or (
            address in IPV4_COMPATIBLE and int(address) > 1):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def is_public(address: Address) -> bool:
    """True when ``address`` (and any IPv4 address embedded in it) is globally routable."""
    for candidate in (address, embedded_ipv4(address)):
        if candidate is None:
            continue
        if (not candidate.is_global or candidate.is_multicast
                or any(candidate in net for net in EXTRA_BLOCKED if
                       net.version == candidate.version)):
            return False
    return True


def validate_url(url: str) -> str:
    """Return ``url`` stripped if it is an http(s) URL to a public address.

    Raises ValueError with the reason (bad scheme, no host, unresolvable, private).
    """
    url = url.strip()
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// URL with a host name")
    if not allow_private():
        resolve_public(parts.hostname, _port(parts.scheme, parts.port))
    return url


def _port(scheme: str, port: int | None) -> int:
    return port or (443 if scheme == "https" else 80)


def resolve(hostname: str, port: int) -> list[Address]:
    """Every address ``hostname`` resolves to (one ``getaddrinfo`` call), in its order.

    Raises ValueError when the name does not resolve.
    """
    try:
        infos = socket.getaddrinfo(hostname, port, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError) as exc:
        raise ValueError(f"cannot resolve {hostname}: {exc}") from None
    return [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]


def resolve_public(hostname: str, port: int) -> list[Address]:
    """The addresses of ``hostname``; ValueError unless every one is public."""
    addresses = resolve(hostname, port)
    for address in addresses:
        if not is_public(address):
            raise ValueError(
                f"{hostname} resolves to the non-public address {address}; set "
                "ALERTS_ALLOW_PRIVATE_WEBHOOKS=true to allow private destinations")
    return addresses


def check_public(hostname: str, port: int) -> None:
    """Raise ValueError unless every address ``hostname`` resolves to is public."""
    resolve_public(hostname, port)


def pinned_request(url: str) -> tuple[str, dict[str, str], dict[str, str]]:
    """``(url_to_connect, extra_headers, httpx_extensions)`` that connect to a checked address.

    The name is resolved once here and every answer checked (unless private destinations
    are allowed); the request then goes to the first address as an IP literal, so a DNS
    answer that changes between the check and the connection (rebinding) cannot redirect
    it. ``Host`` keeps the name, and for https the ``sni_hostname`` extension makes
    httpcore send the name as SNI and verify the certificate against it. Raises ValueError
    (see :func:`validate_url`).
    """
    url = url.strip()
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// URL with a host name")
    hostname, port = parts.hostname, _port(parts.scheme, parts.port)
    addresses = resolve(hostname, port) if allow_private() else resolve_public(hostname, port)
    try:
        ipaddress.ip_address(hostname)
    except ValueError:
        pass
    else:
        return url, {}, {}  # a literal: nothing a resolver could change
    address = addresses[0]
    netloc = f"[{address}]" if address.version == 6 else str(address)
    if parts.port is not None:
        netloc += f":{parts.port}"
    host_header = hostname + (f":{parts.port}" if parts.port is not None else "")
    extensions = {"sni_hostname": hostname} if parts.scheme == "https" else {}
    return urlunsplit(parts._replace(netloc=netloc)), {"Host": host_header}, extensions


def post(url: str, body: bytes, headers: dict[str, str],
         verify: ssl.SSLContext | bool = True) -> httpx.Response:
    """POST ``body`` to ``url`` once, with timeouts and no redirects, to a checked address.

    Proxy environment variables are ignored (``trust_env=False``): a proxy would resolve
    the name itself and defeat the check. Returns the 2xx response. Raises
    TransportError: permanent for refused destinations, redirects and 4xx other than
    408/425/429; transient (with ``retry_after`` when the receiver sent one) for
    timeouts, connection errors, 408/425/429 and 5xx. ``verify``: an SSL context (a
    channel's own CA and client certificate) or True for the system's trust store.
    """
    try:
        target, pinned_headers, extensions = pinned_request(url)
    except ValueError as exc:
        raise TransportError(f"destination refused: {exc}", permanent=True) from None
    timeout = float(getattr(settings, "ALERT_HTTP_TIMEOUT_S", DEFAULT_HTTP_TIMEOUT_S))
    try:
        with httpx.Client(timeout=timeout, follow_redirects=False, trust_env=False,
                          verify=verify) as client:
            request = client.build_request("POST", target, content=body,
                                           headers={**headers, **pinned_headers},
                                           extensions=extensions)
            response = client.send(request)
    except httpx.TimeoutException as exc:
        raise TransportError(f"timed out after {timeout:g} s: {exc!r}") from None
    except httpx.HTTPError as exc:
        raise TransportError(f"connection failed: {exc!r}") from None
    if response.is_success:
        return response
    raise classify_failure(response)


def classify_failure(response: httpx.Response) -> TransportError:
    """Map a non-2xx response to a TransportError (see :func:`post`).

    Only the status code is kept: the body of a failed answer is never stored in the
    delivery log (it may be whatever an internal service answers).
    """
    code = response.status_code
    reason = f"HTTP {code}"
    if code in TRANSIENT_CODES or code >= 500:
        return TransportError(reason, status_code=code,
                              retry_after=parse_retry_after(response.headers.get("Retry-After")))
    if 300 <= code < 400:
        reason += " (redirects are not followed; use the final URL)"
    return TransportError(reason, permanent=True, status_code=code)


def mask_url(url: str) -> str:
    """``url`` with its path and query hidden but the last 4 characters: a Slack incoming
    webhook URL is its own credential. ``https://hooks.slack.com/services/T/B/abcdWXYZ`` ->
    ``https://hooks.slack.com/…WXYZ``; user info in the URL is dropped."""
    parts = urlsplit(url.strip())
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    if parts.port is not None:
        host += f":{parts.port}"
    rest = parts.path + (f"?{parts.query}" if parts.query else "")
    tail = rest[-4:] if len(rest) > 12 else ""
    return f"{parts.scheme}://{host}/…{tail}"


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or HTTP date), or None.

    RFC 9110 section 10.2.3; negative or unparsable values give None.
    """
    if not value:
        return None
    value = value.strip()
    if value.isascii() and value.isdecimal():  # not isdigit(): float("²") raises
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    delta = (when - datetime.now(UTC)).total_seconds()
    return delta if delta >= 0 else None
