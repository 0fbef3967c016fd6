"""A local stand-in for one vLLM server's HTTP API: ``/version``, ``/v1/models``, ``/metrics``.

Answers like vLLM does (vllm-facts.md section 2): ``/version`` and ``/metrics`` need no
key, ``/v1/*`` wants ``Authorization: Bearer <key>`` when the server has ``--api-key``.
``/metrics`` advances the server's :class:`~demo.traffic.TrafficState` to
the current time and renders it in the naming era of the version it claims. Adapted from
``tests/agent/fa_emulator.py``. Binds loopback addresses only (refuses anything else).
"""

from __future__ import annotations

import ipaddress
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from demo.exposition import render
from demo.traffic import TrafficState


@dataclass
class Behaviour:
    """What one emulated server answers; the timeline mutates it (upgrade, restart)."""

    version: str
    model_id: str
    root: str
    max_model_len: int
    state: TrafficState
    api_key: str | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def metrics_text(self) -> str:
        """The exposition at the current time (thread-safe)."""
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
            if b.api_key and self.headers.get("Authorization") != f"Bearer {b.api_key}":
                self._send(401, b'{"error": "Unauthorized"}')
                return
            card = {"id": b.model_id, "object": "model", "owned_by": "vllm", "root": b.root,
                    "parent": None, "max_model_len": b.max_model_len, "permission": []}
            self._send(200, json.dumps({"object": "list", "data": [card]}).encode())
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


class Emulator:
    """One listening emulated server on ``(address, port)``; port 0 picks a free one.

    Raises ``ValueError`` for a non-loopback address and ``OSError`` when the address
    cannot be bound (the caller falls back to 127.0.0.1 with a free port).
    """

    def __init__(self, behaviour: Behaviour, address: str = "127.0.0.1", port: int = 0):
        if not ipaddress.ip_address(address).is_loopback:
            raise ValueError(f"emulators bind loopback addresses only, not {address}")
        self.behaviour = behaviour
        self.httpd = _Server((address, port), _Handler)
        self.httpd.behaviour = behaviour  # type: ignore[attr-defined]
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.2,), daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        """``http://address:port`` to reach it."""
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def stop(self) -> None:
        """Shut down (bounded, :func:`stop_server`) and close the socket."""
        stop_server(self.httpd, self.thread)
