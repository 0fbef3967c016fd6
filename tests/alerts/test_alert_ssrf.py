"""The SSRF guard of Slack/webhook channels: literals, embedded IPv4, DNS rebinding.

The resolver is stubbed at ``socket.getaddrinfo`` (the network seam both
the check and httpcore's connect go through); the receiver is a real HTTP server on
127.0.0.1, which a rebinding name must never reach.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

import pytest

from alerts.transports import TransportError
from alerts.transports.http import pinned_request, post, validate_url

REAL_GETADDRINFO = socket.getaddrinfo
REAL_CREATE_CONNECTION = socket.create_connection
PUBLIC = "93.184.215.14"


@pytest.fixture
def refuse_private(settings: Any) -> None:
    settings.ALERTS_ALLOW_PRIVATE_WEBHOOKS = False
    settings.ALERT_HTTP_TIMEOUT_S = 2


@pytest.mark.parametrize("url", [
    "http://[64:ff9b::7f00:1]/hook",       # NAT64 of 127.0.0.1
    "http://[64:ff9b::a9fe:a9fe]/latest",  # NAT64 of the cloud metadata address
    "http://[2002:7f00:1::]/hook",         # 6to4 of 127.0.0.1
    "http://[2002:a00:1::1]/hook",         # 6to4 of 10.0.0.1
    "http://[::7f00:1]/hook",              # IPv4-compatible 127.0.0.1
    "http://[::ffff:127.0.0.1]/hook",      # IPv4-mapped
    "http://[::ffff:169.254.169.254]/",
    "http://[::ffff:0:127.0.0.1]/hook",    # SIIT IPv4-translated (RFC 6145)
    "http://[::ffff:0:a9fe:a9fe]/latest",
    "http://[::ffff:0:a00:1]/hook",
    "http://192.0.0.1/hook",               # IETF protocol assignments
    "http://192.0.0.9/hook",
    "http://192.0.0.170/hook",
    "http://[64:ff9b:1::a00:1]/hook",      # local-use NAT64 (RFC 8215)
    "http://127.0.0.1:6379/",
    "http://[::1]/",
    "http://100.64.0.1/",                  # carrier-grade NAT
])
def test_non_public_literals_in_any_form_are_refused(refuse_private, url):
    with pytest.raises(ValueError, match="non-public"):
        validate_url(url)


@pytest.mark.parametrize("url", ["http://[64:ff9b::808:808]/", "http://[2002:808:808::]/",
                                 "https://8.8.8.8/hook", "http://[::ffff:0:808:808]/"])
def test_embedded_public_addresses_stay_allowed(refuse_private, url):
    assert validate_url(url) == url


class Rebinder:
    """A resolver that answers ``first`` once for ``name``, then ``later`` (rebinding)."""

    def __init__(self, name: str, first: str, later: str) -> None:
        self.name, self.first, self.later = name, first, later
        self.lookups = 0
        self.connects: list[tuple[str, int]] = []

    def getaddrinfo(self, host: Any, port: Any, *args: Any, **kwargs: Any) -> list:
        if host != self.name:
            return REAL_GETADDRINFO(host, port, *args, **kwargs)
        self.lookups += 1
        address = self.first if self.lookups == 1 else self.later
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "",
                 (address, int(port)))]

    def create_connection(self, address: tuple[str, int], *args: Any, **kwargs: Any) -> Any:
        self.connects.append((address[0], address[1]))
        try:
            literal = ipaddress.ip_address(address[0])
        except ValueError:
            literal = None
        if literal is not None and literal.is_global:  # no internet in tests
            raise OSError(101, "Network is unreachable (test)")
        return REAL_CREATE_CONNECTION(address, *args, **kwargs)


@pytest.fixture
def rebinder(monkeypatch: pytest.MonkeyPatch) -> Rebinder:
    stub = Rebinder("hooks.rebind.test", PUBLIC, "127.0.0.1")
    monkeypatch.setattr(socket, "getaddrinfo", stub.getaddrinfo)
    monkeypatch.setattr(socket, "create_connection", stub.create_connection)
    return stub


def test_a_name_rebinding_to_loopback_after_the_check_never_reaches_it(
        refuse_private, rebinder, receiver):
    port = receiver.server.server_address[1]
    with pytest.raises(TransportError) as caught:
        post(f"http://hooks.rebind.test:{port}/hook", b"{}", {})
    assert receiver.requests == []
    assert rebinder.connects and all(host == PUBLIC for host, _ in rebinder.connects)
    assert not caught.value.permanent  # an unreachable public address is worth a retry


def test_a_name_resolving_to_loopback_is_refused_before_connecting(refuse_private, rebinder,
                                                                   receiver):
    rebinder.first = "127.0.0.1"
    with pytest.raises(TransportError, match="non-public address 127.0.0.1"):
        post(f"http://hooks.rebind.test:{receiver.server.server_address[1]}/", b"{}", {})
    assert rebinder.connects == [] and receiver.requests == []


def test_the_pinned_request_keeps_the_name_in_host_and_tls_sni(refuse_private, rebinder):
    target, headers, extensions = pinned_request("https://hooks.rebind.test/services/T/B/x?a=1")
    assert target == f"https://{PUBLIC}/services/T/B/x?a=1"
    assert headers == {"Host": "hooks.rebind.test"}
    assert extensions == {"sni_hostname": "hooks.rebind.test"}


def test_the_receiver_sees_the_configured_name_in_host(settings, rebinder, receiver):
    settings.ALERTS_ALLOW_PRIVATE_WEBHOOKS = True  # the name resolves to 127.0.0.1 here
    rebinder.first = "127.0.0.1"
    port = receiver.server.server_address[1]
    assert post(f"http://hooks.rebind.test:{port}/hook", b"{}", {}).status_code == 200
    [request] = receiver.requests
    assert request.headers["Host"] == f"hooks.rebind.test:{port}"
    assert rebinder.lookups == 1
