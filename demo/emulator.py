"""A local stand-in for one vLLM server's HTTP API: ``/version``, ``/v1/models``, ``/metrics``
(and, for the live probes, ``/v1/chat/completions`` and ``/tokenize``).

Answers like vLLM does (vllm-facts.md section 2): ``/version`` and ``/metrics`` need no
key, ``/v1/*`` wants ``Authorization: Bearer <key>`` when the server has ``--api-key``.
``/metrics`` either advances the server's :class:`~demo.traffic.TrafficState` to the current
time and renders it in the naming era of the version it claims (the demo fleet), or, without
a state, answers a fixed text (the agent tests serve real captures verbatim). Binds loopback
addresses only (refuses anything else), or a Unix socket (``--uds``).

The one emulator of the project: the demo fleet and the agent tests both use it, so it imports
no Django, Celery or psycopg (tests/test_architecture.py checks).
"""

from __future__ import annotations

import ipaddress
import json
import os
import socketserver
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from demo.exposition import render
from demo.traffic import TrafficState

#: How many ``Authorization`` headers :attr:`Behaviour.seen_auth` keeps.
SEEN_AUTH_KEEP = 64


@dataclass
class Behaviour:
    """What one emulated server answers; the timeline mutates it (upgrade, restart)."""

    version: str
    model_id: str
    root: str
    #: ``max_model_len`` of the model card; None where the spec does not say.
    max_model_len: int | None = 65536
    #: Traffic rendered on each scrape; None: :attr:`metrics` is served as it is.
    state: TrafficState | None = None
    #: The fixed ``/metrics`` body when there is no :attr:`state`.
    metrics: str = ""
    api_key: str | None = None
    #: Live-probe failure shapes this server shows (see :data:`FAULTS`); empty: healthy.
    faults: set[str] = field(default_factory=set)
    #: Draft acceptance of its drafter (0-1) when it runs speculative decoding, else None.
    draft_acceptance: float | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: POST requests received (chat completions, tokenize): a server whose probes are off
    #: must stay at 0.
    posts: int = 0
    #: ``Authorization`` header (None when absent) of the latest ``GET /v1/*`` requests, oldest
    #: first: tests check which key the agent sent. Bounded, as the demo runs for days.
    seen_auth: deque[str | None] = field(default_factory=lambda: deque(maxlen=SEEN_AUTH_KEEP))

    def metrics_text(self) -> str:
        """The exposition at the current time (thread-safe), or the fixed text."""
        if self.state is None:
            return self.metrics
        with self.lock:
            self.state.advance(time.time())
            return render(self.state)


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:  # one line per scrape would drown the demo log
        pass

    def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - http.server API
        b: Behaviour = self.server.behaviour  # type: ignore[attr-defined]
        if self.path == "/version":
            self._send(200, json.dumps({"version": b.version}).encode())
        elif self.path == "/metrics":
            self._send(200, b.metrics_text().encode(), "text/plain; version=0.0.4; charset=utf-8")
        elif self.path == "/v1/models":
            auth = self.headers.get("Authorization")
            b.seen_auth.append(auth)
            if b.api_key and auth != f"Bearer {b.api_key}":
                self._send(401, b'{"error": "Unauthorized"}')
                return
            card = {"id": b.model_id, "object": "model", "owned_by": "vllm", "root": b.root,
                    "parent": None, "max_model_len": b.max_model_len, "permission": []}
            self._send(200, json.dumps({"object": "list", "data": [card]}).encode())
        else:
            self._send(404, b'{"detail": "Not Found"}')

    def do_POST(self) -> None:  # noqa: N802 - http.server API
        b: Behaviour = self.server.behaviour  # type: ignore[attr-defined]
        b.posts += 1
        if b.api_key and self.headers.get("Authorization") != f"Bearer {b.api_key}":
            self._send(401, b'{"error": "Unauthorized"}')
            return
        try:
            length = min(int(self.headers.get("Content-Length") or 0), 1 << 20)
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self._send(400, b'{"error": "bad json"}')
            return
        if self.path == "/v1/chat/completions" and body.get("stream"):
            self._send(200, chat_stream(b), "text/event-stream")
        elif self.path == "/v1/chat/completions":
            self._send(200, json.dumps(chat_answer(b, body)).encode())
        elif self.path == "/tokenize":
            self._send(200, json.dumps(tokenize_answer(b, body)).encode())
        else:
            self._send(404, b'{"detail": "Not Found"}')


#: Longest wait for a server's poll loop to end, seconds (it polls every 0.2 s).
STOP_TIMEOUT_S = 3.0


def stop_server(httpd: ThreadingHTTPServer, thread: threading.Thread,
                timeout: float = STOP_TIMEOUT_S) -> None:
    """Stop ``httpd`` (served by ``thread``) within ``timeout`` seconds and free its port.

    ``shutdown()`` waits without a timeout for ``serve_forever`` to end (forever if that loop
    never ran or is stuck), so it runs in a helper thread joined with a timeout; the socket
    is closed either way, which frees the port.
    """
    if thread.is_alive():
        helper = threading.Thread(target=httpd.shutdown, name="server-shutdown", daemon=True)
        helper.start()
        helper.join(timeout)
    httpd.server_close()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


class Emulator:
    """One listening emulated server on ``(address, port)``; port 0 picks a free one. With
    ``uds`` (a filesystem path) it listens on that Unix socket instead, as ``vllm serve --uds``.

    Raises ``ValueError`` for a non-loopback address and ``OSError`` when the address
    cannot be bound (the caller falls back to 127.0.0.1 with a free port).
    """

    def __init__(self, behaviour: Behaviour, address: str = "127.0.0.1", port: int = 0,
                 uds: str | None = None):
        if not ipaddress.ip_address(address).is_loopback:
            raise ValueError(f"emulators bind loopback addresses only, not {address}")
        self.behaviour = behaviour
        self.uds = uds
        self.httpd = _UnixServer(uds, _Handler) if uds else _Server((address, port), _Handler)
        self.httpd.behaviour = behaviour  # type: ignore[attr-defined]
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.2,), daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        """The bound TCP port (not for a Unix socket)."""
        return self.httpd.server_address[1]

    @property
    def base_url(self) -> str:
        """``http://address:port`` (``unix:<path>`` for a Unix socket) to reach it."""
        if self.uds:
            return f"unix:{self.uds}"
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def stop(self) -> None:
        """Shut down (bounded, :func:`stop_server`), close the socket, remove a Unix socket."""
        stop_server(self.httpd, self.thread)
        if self.uds and os.path.exists(self.uds):
            os.unlink(self.uds)


# ------------------------------------------------------------------ live-probe answers
#: Faults an emulated server can be switched into (``Behaviour.faults``), each the failure shape
#: of the advisory a probe tests: ``stream_turn_leak`` (#49955: the streamed tail carries
#: ``<turn|>``), ``tool_choice_prose`` (#50477: forced tool_choice answered with prose),
#: ``cot_leak`` (#45834/#45852: reasoning in ``content`` after a tool response),
#: ``template_drops_tool`` (the rendered prompt loses the tool response).
FAULTS = frozenset({"stream_turn_leak", "tool_choice_prose", "cot_leak", "template_drops_tool"})
#: Tokens each emulated chat completion generates (the probes cap max_tokens at 48+).
EMULATED_COMPLETION_TOKENS = 12
#: Draft tokens proposed per generated token when ``draft_acceptance`` is set (k=3 EAGLE3).
EMULATED_SPEC_K = 3


def chat_answer(b: Behaviour, body: dict) -> dict:
    """The non-streamed answer of ``POST /v1/chat/completions`` for ``body``."""
    _count_drafts(b)
    message: dict = {"role": "assistant", "content": "Hello! How can I help you today?"}
    finish = "stop"
    choice = body.get("tool_choice")
    if choice == "required" or isinstance(choice, dict):
        finish = "tool_calls"
        if "tool_choice_prose" not in b.faults:
            message = {"role": "assistant", "content": None, "tool_calls": [{
                "id": "call_1", "type": "function",
                "function": {"name": "get_time", "arguments": "{\"city\": \"Paris\"}"}}]}
        else:
            message["content"] = "I would call get_time for Paris."
    elif (body.get("messages") or [{}])[-1].get("role") == "tool":
        if "cot_leak" in b.faults:
            message["content"] = "<think>The tool said 14:05.</think>It is 14:05 in Paris."
        else:
            message = {"role": "assistant", "content": "It is 14:05 in Paris.",
                       "reasoning_content": "The tool said 14:05."}
    return {"id": "chatcmpl-emu", "object": "chat.completion", "model": b.model_id,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}]}


def chat_stream(b: Behaviour) -> bytes:
    """The SSE body of a streamed completion; its tail leaks ``<turn|>`` under the fault."""
    _count_drafts(b)
    pieces = ["Hello", "!", " Nice", " to", " meet", " you", "."]
    if "stream_turn_leak" in b.faults:
        pieces.append("<turn|>")
    events = [{"choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]}
              for p in pieces]
    events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    return b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in events) + b"data: [DONE]\n\n"


def tokenize_answer(b: Behaviour, body: dict) -> dict:
    """``POST /tokenize`` with ``messages``: the rendered prompt as token strings."""
    parts = []
    for m in body.get("messages") or []:
        if m.get("role") == "tool" and "template_drops_tool" in b.faults:
            continue
        parts.append(f"<|turn>{m.get('role')}\n{m.get('content') or ''}<turn|>\n")
    rendered = "".join(parts) + "<|turn>model\n"
    return {"count": len(rendered), "max_model_len": b.max_model_len,
            "tokens": list(range(len(rendered))), "token_strs": list(rendered)}


def _count_drafts(b: Behaviour) -> None:
    """Advance the spec-decode counters by one completion's drafts at the set acceptance."""
    if b.draft_acceptance is None or b.state is None:
        return
    with b.lock:
        drafts = EMULATED_COMPLETION_TOKENS / (1 + EMULATED_SPEC_K * b.draft_acceptance)
        b.state._add("vllm:spec_decode_num_drafts", drafts)
        b.state._add("vllm:spec_decode_num_draft_tokens", drafts * EMULATED_SPEC_K)
        b.state._add("vllm:spec_decode_num_accepted_tokens",
                     drafts * EMULATED_SPEC_K * b.draft_acceptance)
