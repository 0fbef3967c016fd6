"""A report the dashboard answers 500 for, cycle after cycle, is set aside after
``MAX_SERVER_ERRORS`` answers; the reports behind it are delivered (harden item 2)."""

from __future__ import annotations

import gzip
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from fleet_agent import deliver
from fleet_agent.deliver import MAX_SERVER_ERRORS, Deliverer
from fleet_agent.spool import Spool, StateFile

POISON = "00000000-0000-0000-0000-00000000dead"


class _Dashboard(BaseHTTPRequestHandler):
    """500 for the poison report, 503 for any report while ``down``, else 202."""

    received: list[str] = []
    down = False

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(gzip.decompress(self.rfile.read(int(self.headers["Content-Length"]))))
        status = 503 if self.down else 500 if body["report_id"] == POISON else 202
        if status == 202:
            self.received.append(body["report_id"])
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"error": "internal error", "details": []}')

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def dashboard():
    _Dashboard.received, _Dashboard.down = [], False
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Dashboard)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _spool(tmp_path: Path) -> Spool:
    return Spool(tmp_path / "spool", 10, 10**7, StateFile(tmp_path / "state.json"))


def _body(report_id: str) -> bytes:
    return gzip.compress(json.dumps({"report_id": report_id}).encode())


def test_a_report_answered_500_repeatedly_is_set_aside_and_the_next_delivered(
        tmp_path: Path, dashboard: str, monkeypatch) -> None:
    monkeypatch.setattr(deliver, "backoff_delay", lambda attempt, rng=None: 0.0)
    spool = _spool(tmp_path)
    poison = spool.put(POISON, _body(POISON))
    good = "00000000-0000-0000-0000-000000000002"
    spool.put(good, _body(good))
    deliverer = Deliverer(spool, dashboard, "token")
    cycles = []
    for _ in range(4):
        cycles.append(deliverer.drain(budget_s=10))
        if spool.depth() == 0:
            break
    deliverer.close()
    assert cycles[0]["outcome"] == "transient" and cycles[0]["delivered"] == 0  # not at once
    assert _Dashboard.received == [good]
    assert (tmp_path / "spool" / "rejected" / poison.name).exists()
    assert len(cycles) == -(-MAX_SERVER_ERRORS // deliver.MAX_ATTEMPTS)


def test_a_dashboard_that_is_down_never_sets_a_report_aside(tmp_path: Path, dashboard: str,
                                                            monkeypatch) -> None:
    monkeypatch.setattr(deliver, "backoff_delay", lambda attempt, rng=None: 0.0)
    _Dashboard.down = True
    spool = _spool(tmp_path)
    report_id = "00000000-0000-0000-0000-000000000003"
    spool.put(report_id, _body(report_id))
    deliverer = Deliverer(spool, dashboard, "token")
    for _ in range(MAX_SERVER_ERRORS + 1):
        deliverer.drain(budget_s=10)
    _Dashboard.down = False
    deliverer.drain(budget_s=10)
    deliverer.close()
    assert _Dashboard.received == [report_id]
