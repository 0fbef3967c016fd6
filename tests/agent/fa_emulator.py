"""A local stand-in for vLLM's HTTP API: ``/version``, ``/v1/models``, ``/metrics``.

Answers like vLLM does (vllm-facts.md section 2): ``/version`` and ``/metrics`` need
no key, ``/v1/*`` wants ``Authorization: Bearer <key>`` when a key is set and answers
401 otherwise. Binds 127.0.0.1 on a random port; one instance per fake server.
"""

from __future__ import annotations

import json
import os
import socketserver
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class VllmBehaviour:
    """What one emulated server answers."""

    version: str
    model_id: str
    root: str
    max_model_len: int = 65536
    metrics: str = ""
    api_key: str | None = None
    seen_auth: list[str | None] = field(default_factory=list)


class _Handler(BaseHTTPRequestHandler):
    behaviour: VllmBehaviour

    def log_message(self, *args) -> None:  # keep test output quiet
        pass

    def _send(self, status: int, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - http.server API
        b = self.server.behaviour  # type: ignore[attr-defined]
        if self.path == "/version":
            self._send(200, json.dumps({"version": b.version}).encode(), "application/json")
        elif self.path == "/metrics":
            self._send(200, b.metrics.encode(), "text/plain; version=0.0.4; charset=utf-8")
        elif self.path == "/v1/models":
            auth = self.headers.get("Authorization")
            b.seen_auth.append(auth)
            if b.api_key and auth != f"Bearer {b.api_key}":
                self._send(401, b'{"error": "Unauthorized"}', "application/json")
                return
            card = {"id": b.model_id, "object": "model", "owned_by": "vllm", "root": b.root,
                    "parent": None, "max_model_len": b.max_model_len, "permission": []}
            self._send(200, json.dumps({"object": "list", "data": [card]}).encode(),
                       "application/json")
        else:
            self._send(404, b'{"detail": "Not Found"}', "application/json")


class _UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


class VllmEmulator:
    """Start/stop one emulated vLLM server; ``base_url`` is ``http://127.0.0.1:<port>``.

    With ``uds`` it listens on that Unix socket path instead (``--uds``).
    """

    def __init__(self, behaviour: VllmBehaviour, uds: str | None = None):
        self.uds = uds
        if uds:
            self.httpd = _UnixHTTPServer(uds, _Handler)
        else:
            self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.behaviour = behaviour  # type: ignore[attr-defined]
        self.behaviour = behaviour
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        """The bound port."""
        return self.httpd.server_address[1]

    @property
    def base_url(self) -> str:
        """URL to reach it."""
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        """Shut down and close the socket."""
        self.httpd.shutdown()
        self.httpd.server_close()
        if self.uds and os.path.exists(self.uds):
            os.unlink(self.uds)
