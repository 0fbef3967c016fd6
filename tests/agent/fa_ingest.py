"""Ingest stand-in: a small real dashboard process for delivery tests.

Run as ``python fa_ingest.py PORT STORE_FILE [MODE]``. It accepts
``POST /api/v1/reports`` (gzip JSON, ``Authorization: Bearer good-token``), appends
each *new* ``report_id`` with its ``collected_at`` to ``STORE_FILE`` (one JSON line),
answers 202 for new reports and 200 for duplicates, and ``POST /api/v1/enroll``
(``secret == "enroll-me"`` -> ``{"token": "good-token"}``). Modes:

* ``normal``;
* ``drop-first``: the first report is stored but the connection is closed without an
  answer (the agent must re-send it, and it must still be stored once);
* ``busy``: the first two POSTs get 429 with ``Retry-After: 1``;
* ``reject``: every report gets 422 with an error body.
"""

from __future__ import annotations

import gzip
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

TOKEN = "good-token"
ENROLL_SECRET = "enroll-me"


class Handler(BaseHTTPRequestHandler):
    """Handles the two ingest endpoints."""

    store: Path
    mode: str
    posts = 0

    def log_message(self, *args) -> None:
        pass

    def _answer(self, status: int, body: dict, headers: dict | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:  # noqa: N802 - http.server API
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path == "/api/v1/enroll":
            body = json.loads(raw)
            if body.get("secret") != ENROLL_SECRET or not body.get("machine_id"):
                self._answer(403, {"error": "bad enrollment secret"})
            else:
                self._answer(201, {"token": TOKEN, "host": body["hostname"]})
            return
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            self._answer(401, {"error": "unknown token"})
            return
        Handler.posts += 1
        self._report(raw)

    def _report(self, raw: bytes) -> None:
        if self.headers.get("Content-Encoding") == "gzip":
            raw = gzip.decompress(raw)
        report = json.loads(raw)
        if self.mode == "reject":
            self._answer(422, {"error": "invalid report", "details": [{"path": "servers[0].pid"}]})
            return
        if self.mode == "busy" and Handler.posts <= 2:
            self._answer(429, {"error": "slow down"}, {"Retry-After": "1"})
            return
        seen = {json.loads(line)["report_id"] for line in self.store.read_text().splitlines()} \
            if self.store.exists() else set()
        if report["report_id"] in seen:
            self._answer(200, {"status": "duplicate"})
            return
        with open(self.store, "a") as fh:
            fh.write(json.dumps({"report_id": report["report_id"],
                                 "collected_at": report["collected_at"]}) + "\n")
        if self.mode == "drop-first" and Handler.posts == 1:
            self.close_connection = True  # stored, but the agent never hears back
            return
        self._answer(202, {"status": "accepted"})


def main() -> None:
    """Serve forever on 127.0.0.1:PORT."""
    port, store = int(sys.argv[1]), Path(sys.argv[2])
    Handler.store = store
    Handler.mode = sys.argv[3] if len(sys.argv) > 3 else "normal"
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print("ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
