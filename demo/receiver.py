"""A local webhook receiver for the demo: stores each alert POST as a JSON file.

``WebhookReceiver(directory, port)`` listens on 127.0.0.1 and writes every body it
receives to ``<directory>/<n>-<X-Fleet-Event>.json`` together with the signature and
delivery headers, then answers 204, so a newcomer can see the webhook messages the
dashboard sent (``var/webhook/``) next to the file-backend emails (``var/mail/``).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from demo.emulator import stop_server

#: Largest body kept, bytes (an alert message is a few KiB).
MAX_BODY_BYTES = 1 << 20


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802 - http.server API
        receiver: WebhookReceiver = self.server.receiver  # type: ignore[attr-defined]
        length = min(int(self.headers.get("Content-Length") or 0), MAX_BODY_BYTES)
        body = self.rfile.read(length)
        try:
            payload = json.loads(body)
        except ValueError:
            payload = body.decode("utf-8", "replace")
        receiver.store(self.path, dict(self.headers), payload)
        self.send_response(204)
        self.end_headers()


class WebhookReceiver:
    """Listen on ``127.0.0.1:port`` (0 = any free port) and store what arrives."""

    def __init__(self, directory: Path, port: int = 0):
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), _Handler)
        self.httpd.daemon_threads = True
        self.httpd.receiver = self  # type: ignore[attr-defined]
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.2,), daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def store(self, path: str, headers: dict[str, str], payload: object) -> Path:
        """Write one received message; returns the file written."""
        with self._lock:
            number = len(list(self.directory.glob("*.json"))) + 1
            event = "".join(c for c in headers.get("X-Fleet-Event", "message") if c.isalnum()
                            or c == "_")[:40]
            target = self.directory / f"{number:04d}-{event}.json"
            keep = {k: v for k, v in headers.items() if k.lower().startswith("x-fleet")}
            target.write_text(json.dumps({"path": path, "headers": keep, "body": payload},
                                         indent=1, ensure_ascii=False))
        return target

    def stop(self) -> None:
        """Shut down (bounded, :func:`demo.emulator.stop_server`) and close the socket."""
        stop_server(self.httpd, self.thread)
