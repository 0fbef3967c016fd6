"""Test kit for the alert tests: factories, a local HTTP receiver, an SMTP sink.

Real servers only: the receiver is an ``http.server`` thread on 127.0.0.1 that
records every request and answers from a script (e.g. 500, 500, 200); the SMTP
sink is an in-process aiosmtpd server.
"""

from __future__ import annotations

import email
import email.policy
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import factory
from aiosmtpd.controller import Controller
from django.utils import timezone
from factory.django import DjangoModelFactory

from alerts.models import AlertChannel
from audit.models import Finding, FindingEvent
from fleet.models import Host, Server

# --- factories ---------------------------------------------------------------------

class HostFactory(DjangoModelFactory):
    class Meta:
        model = Host

    machine_id = factory.Sequence(lambda n: f"alert-machine-{n}")
    hostname = factory.Sequence(lambda n: f"gpu-node-{n:03d}")
    last_seen = factory.LazyFunction(timezone.now)
    agent_interval_s = 30


class ServerFactory(DjangoModelFactory):
    class Meta:
        model = Server

    host = factory.SubFactory(HostFactory)
    identity = "port:8000"
    pid = 4242
    vllm_version = "0.27.0"
    installed_vllm_version = "0.27.0"


class FindingFactory(DjangoModelFactory):
    class Meta:
        model = Finding

    server = factory.SubFactory(ServerFactory)
    host = factory.LazyAttribute(lambda o: o.server.host)
    rule_id = factory.Sequence(lambda n: f"test-rule-{n}")
    kind = "known_issue"
    severity = "critical"
    title = factory.LazyAttribute(lambda o: f"Regression {o.rule_id}")
    message = "Streamed tool calls leak <turn|> markers on this version."
    remediation = "Pin vLLM 0.25.1 or upgrade to 0.28.0."


class FindingEventFactory(DjangoModelFactory):
    """An event; pass ``finding=`` (host/server follow it) or ``host=``/``server=``."""

    class Meta:
        model = FindingEvent

    kind = FindingEvent.Kind.OPENED
    finding = None
    server = factory.LazyAttribute(lambda o: o.finding.server if o.finding else None)
    host = factory.LazyAttribute(lambda o: o.finding.host if o.finding else o.server.host)
    rule_id = factory.LazyAttribute(lambda o: o.finding.rule_id if o.finding else "")
    severity = factory.LazyAttribute(lambda o: o.finding.severity if o.finding else "")
    at = factory.LazyFunction(timezone.now)


class ChannelFactory(DjangoModelFactory):
    class Meta:
        model = AlertChannel

    kind = "webhook"
    name = factory.Sequence(lambda n: f"channel-{n}")
    destination = "http://127.0.0.1:9/"
    secret = "s3cret-for-tests"
    min_severity = "high"


def upgrade_event(server: Server, findings: list[Finding], old: str = "0.25.1",
                  new: str = "0.27.0", **kw: Any) -> FindingEvent:
    """A version_changed event as evaluation writes it (payload.opened lists high+ findings)."""
    opened = [{"rule_id": f.rule_id, "severity": f.severity, "title": f.title} for f in findings]
    return FindingEventFactory(kind=FindingEvent.Kind.VERSION_CHANGED, server=server,
                               payload={"old": old, "new": new, "opened": opened,
                                        "resolved": []}, **kw)


# --- HTTP receiver -----------------------------------------------------------------

@dataclass
class Received:
    """One request the receiver got."""

    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


HOLD = 0


@dataclass
class Receiver:
    """A local HTTP server answering POSTs from ``script`` (the last entry repeats)."""

    script: list[tuple[int, dict[str, str], bytes]] = field(
        default_factory=lambda: [(200, {}, b"ok")])
    requests: list[Received] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None
    #: A scripted status of HOLD keeps the request open until ``release`` is set.
    release: threading.Event = field(default_factory=threading.Event)

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def answer(self, *responses: tuple[int, dict[str, str], bytes]) -> None:
        """Replace the script: each request takes the next response."""
        self.script = list(responses)

    def respond(self) -> tuple[int, dict[str, str], bytes]:
        index = min(len(self.requests) - 1, len(self.script) - 1)
        return self.script[index]

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.requests.append(Received(self.path, dict(self.headers), body))
                code, headers, payload = receiver.respond()
                if code == HOLD:
                    receiver.release.wait(120)
                    code = 200
                self.send_response(code)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.release.set()
            self.server.shutdown()
            self.server.server_close()


# --- SMTP sink ---------------------------------------------------------------------

class SmtpSink:
    """aiosmtpd handler keeping every message as an ``email.message.EmailMessage``."""

    def __init__(self) -> None:
        self.messages: list[email.message.EmailMessage] = []
        self.recipients: list[list[str]] = []
        self.reject: set[str] = set()

    async def handle_RCPT(self, server: Any, session: Any, envelope: Any, address: str,  # noqa: N802
                          rcpt_options: list[str]) -> str:
        if address in self.reject:
            return "550 5.1.1 no such user"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802
        self.messages.append(email.message_from_bytes(envelope.content,
                                                      policy=email.policy.default))
        self.recipients.append(list(envelope.rcpt_tos))
        return "250 Message accepted for delivery"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_smtp() -> tuple[Controller, SmtpSink]:
    sink = SmtpSink()
    controller = Controller(sink, hostname="127.0.0.1", port=free_port())
    controller.start()
    return controller, sink


#: Longest wait, seconds, for a condition a test expects: generous, as CI runs on a loaded
#: 2-core machine; a passing test stops waiting as soon as the condition holds.
WAIT_S = 120.0


def wait_for(predicate: Callable[[], bool], timeout_s: float = WAIT_S) -> bool:
    """Poll ``predicate`` every 0.1 s until true or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()
