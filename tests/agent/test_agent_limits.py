"""A local process cannot blow up or blind the agent.

A real HTTP server on the loopback plays a hostile "vLLM": a 400 MB /metrics body, 60,000
models, a huge argv. The agent streams with byte caps, cuts per-server lists to the
contract's limits and drops only the offending server; the report it builds passes the
dashboard's own check (``parse_report``) and fits the size limit. A report the dashboard
refuses with a 4xx is set aside, not retried forever.
"""

from __future__ import annotations

import gzip
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from fa_fakenode import FakeNode

from fleet_agent import schema, trim
from fleet_agent.deliver import Deliverer
from fleet_agent.spool import Spool, StateFile

_MIB = 1024 * 1024


class _Hostile(BaseHTTPRequestHandler):
    metrics_mib = 400
    models = 60_000

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server API
        if self.path == "/version":
            return self._json({"version": "0.25.1"})
        if self.path == "/v1/models":
            return self._json({"object": "list", "data": [
                {"id": f"model-{i}", "root": "r", "max_model_len": 2**40}
                for i in range(self.models)]})
        line = b'vllm:num_requests_running{model_name="m"} 1\n'
        chunk = line * (_MIB // len(line))
        self.send_response(200)
        self.send_header("Content-Length", str(len(chunk) * self.metrics_mib))
        self.end_headers()
        try:
            for _ in range(self.metrics_mib):
                self.wfile.write(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the agent stopped reading: what it should do

    def _json(self, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def hostile():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hostile)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_huge_answers_are_cut_and_the_report_still_fits(node: FakeNode, run_collect,
                                                        hostile) -> None:
    pids = node.add_vllm(["vllm", "serve", "m/x", "--port", str(hostile)], listen=(hostile,))
    report = run_collect(node)
    entry = next(s for s in report.servers if s.pid == pids.server)
    assert len(entry.models) == schema.MAX_MODELS
    assert all(m.max_model_len is None for m in entry.models)  # 2**40 is past PostgreSQL's
    assert any("60000 models" in e for e in entry.errors)
    assert entry.metrics is not None and len(entry.metrics.text) <= schema.MAX_METRICS_CHARS
    assert any("cut there" in e for e in entry.errors)
    data = report.model_dump(mode="json")
    schema.parse_report(data)  # what the dashboard checks
    assert trim.report_size(data) <= schema.MAX_REPORT_BYTES


def test_a_server_with_an_argv_past_the_caps_is_dropped_not_the_report(node: FakeNode,
                                                                        run_collect) -> None:
    flood = ["vllm", "serve", "m/flood"] + ["--x"] * (schema.MAX_ARGV + 10)
    node.add_vllm(flood, listen=())
    good = node.add_vllm(["vllm", "serve", "m/good", "--port", "1"], listen=())
    report = run_collect(node, probe_http=False)
    assert [s.pid for s in report.servers] == [good.server]


def test_conform_cuts_columns_lists_and_bad_characters() -> None:
    data = {
        "host": {"hostname": "h", "machine_id": "m", "os": "o" * 300,
                 "nvidia_driver_version": "9" * 100,
                 "labels": {f"k{i}": "v" for i in range(200)}},
        "gpus": [], "gpu_processes": [], "gpu_error": None,
        "servers": [{"pid": 7, "argv": ["vllm", "serve", "m\x00\ud800"], "env": {},
                     "vllm_version": "1" * 200, "container_image": "i" * 600,
                     "errors": [f"e{i}" for i in range(100)],
                     "chat_template": {"source": "s" * 1200, "sha256": "a" * 64,
                                       "size_bytes": 1},
                     "metrics": {"scraped_at": "2026-01-01T00:00:00Z",
                                 "text": "x" * (schema.MAX_METRICS_LINE_CHARS + 1)
                                 + "\nvllm:num_requests_running 1\n"}}],
    }
    out = trim.conform(data)
    host, server = out["host"], out["servers"][0]
    assert len(host["os"]) == 255 and len(host["nvidia_driver_version"]) == 64
    assert len(host["labels"]) == schema.MAX_LABELS
    assert server["argv"][2] == "m?"
    assert len(server["vllm_version"]) == 128 and len(server["container_image"]) == 500
    assert len(server["chat_template"]["source"]) == 1000
    assert len(server["errors"]) == schema.MAX_ERRORS
    assert server["metrics"]["text"] == "vllm:num_requests_running 1\n"


@pytest.mark.django_db(transaction=True)
def test_a_refused_report_is_set_aside_and_the_next_one_is_delivered(
        tmp_path: Path, live_server, make_report) -> None:
    from fleet.models import AgentToken, Host, Report

    _, token = AgentToken.issue(Host.objects.create(machine_id="machine-1", hostname="n"))

    def report(**top) -> bytes:
        return gzip.compress(json.dumps(make_report(**top)).encode())

    spool = Spool(tmp_path / "spool", 10, 10**7, StateFile(tmp_path / "state.json"))
    bad = spool.put("00000000-0000-0000-0000-000000000001",
                    report(collected_at="2099-01-01T00:00:00Z"))
    spool.put("00000000-0000-0000-0000-000000000002", report())
    deliverer = Deliverer(spool, live_server.url, token)
    summary = deliverer.drain(budget_s=20)
    deliverer.close()
    assert (summary["rejected"], summary["delivered"], spool.depth()) == (1, 1, 0)
    assert (tmp_path / "spool" / "rejected" / bad.name).exists()
    assert Report.objects.count() == 1
