"""One slow local server cannot stall the node's reporting.

A fake server that drips its ``/metrics`` one byte at a time (each byte inside the 5 s read
timeout, so no single read ever times out) held ``collect`` for minutes. Each server's three
endpoints now share one overall deadline (``probe.SCRAPE_DEADLINE_S``) and the cycle's
servers a budget (``CycleInput.budget_s``): the cycle ends, the slow server is reported with
an error line, and the other servers are reported in full.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from demo.emulator import Behaviour, Emulator
from fleet_agent import probe
from fleet_agent.collect import CycleInput, collect
from fleet_agent.config import AgentConfig, ServerOverride

#: How long the dripping server keeps a /metrics answer going (then it closes); the cycle
#: must end long before: before the fix it lasted this long.
DRIP_FOR_S = 60.0
METRICS = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1\n"


class _Drip(BaseHTTPRequestHandler):
    stop = threading.Event()

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path != "/metrics":
            body = json.dumps({"version": "0.25.1"} if self.path == "/version" else
                              {"data": [{"id": "slow-model", "root": "slow-model"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(200)
        self.send_header("Content-Length", "100000")
        self.end_headers()
        end = time.monotonic() + DRIP_FOR_S
        while time.monotonic() < end and not self.stop.is_set():
            try:
                self.wfile.write(b"#")
                self.wfile.flush()
            except OSError:
                return
            self.stop.wait(1.0)  # one byte a second


@pytest.fixture
def two_servers(node) -> Iterator[tuple[object, AgentConfig, int, int]]:
    drip = ThreadingHTTPServer(("127.0.0.1", 0), _Drip)
    drip.daemon_threads = True
    threading.Thread(target=drip.serve_forever, daemon=True).start()
    good = Emulator(Behaviour(version="0.25.1", model_id="good-model", root="good-model",
                              metrics=METRICS))
    slow_pid = node.add_vllm(["vllm", "serve", "slow-model", "--port", "8001"],
                             listen=()).server
    good_pid = node.add_vllm(["vllm", "serve", "good-model", "--port", "8002"],
                             listen=()).server
    config = AgentConfig(servers=[
        ServerOverride(match_pid=slow_pid, base_url=f"http://127.0.0.1:{drip.server_port}"),
        ServerOverride(match_pid=good_pid, base_url=good.base_url)])
    yield node, config, slow_pid, good_pid
    _Drip.stop.set()
    drip.shutdown()
    good.stop()
    _Drip.stop = threading.Event()  # a fresh one: the next test's handlers must drip again


def _run(node, config: AgentConfig, budget_s: float):
    started = time.monotonic()
    report = collect(CycleInput(config=config, root=node.root, gpu_source="none",
                                budget_s=budget_s))
    return report, time.monotonic() - started


def test_a_dripping_metrics_endpoint_is_cut_at_the_scrape_deadline(two_servers, monkeypatch):
    node, config, slow_pid, good_pid = two_servers
    monkeypatch.setattr(probe, "SCRAPE_DEADLINE_S", 3.0)
    report, took = _run(node, config, budget_s=DRIP_FOR_S * 2)
    assert took < DRIP_FOR_S / 2  # not stalled by the drip (it lasts DRIP_FOR_S)
    servers = {s.pid: s for s in report.servers}
    slow, good = servers[slow_pid], servers[good_pid]
    assert slow.vllm_version == "0.25.1" and slow.metrics is None
    assert any("/metrics" in e and "deadline" in e for e in slow.errors), slow.errors
    assert good.metrics is not None and "num_requests_running" in good.metrics.text
    assert not [e for e in good.errors if "GET " in e or "deadline" in e], good.errors


def test_the_cycle_budget_reports_the_other_servers_and_the_slow_ones_process(
        two_servers, monkeypatch):
    node, config, slow_pid, good_pid = two_servers
    monkeypatch.setattr(probe, "SCRAPE_DEADLINE_S", DRIP_FOR_S * 2)  # only the budget cuts
    report, took = _run(node, config, budget_s=3.0)
    assert took < DRIP_FOR_S / 2
    servers = {s.pid: s for s in report.servers}
    slow, good = servers[slow_pid], servers[good_pid]
    assert slow.argv[:3] == ["vllm", "serve", "slow-model"]
    assert slow.errors == ["collection did not finish within the cycle's 3 s budget"]
    assert good.metrics is not None and good.vllm_version == "0.25.1"


def test_a_live_probe_request_is_cut_at_the_probes_deadline(two_servers):
    import httpx

    from fleet_agent import probes

    node, config, _, _ = two_servers
    server = probes.Server(config.servers[0].base_url, "slow-model", timeout_s=2.0)
    started = time.monotonic()
    with probe.make_client(server.base_url) as client:
        server.client = client
        with pytest.raises(httpx.TimeoutException):
            server.get("/metrics")
    assert time.monotonic() - started < DRIP_FOR_S / 2
