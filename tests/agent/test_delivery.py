"""Delivery against a real ingest stand-in process that is stopped and restarted."""

from __future__ import annotations

import gzip
import json
import logging
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fa_fakenode import FakeNode

from fleet_agent import config as agent_config
from fleet_agent import trim
from fleet_agent.deliver import Deliverer
from fleet_agent.schema import MAX_REPORT_BYTES
from fleet_agent.spool import Spool, StateFile

HERE = Path(__file__).parent
REPO = HERE.parents[1]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Ingest:
    """The stand-in dashboard as a subprocess on a fixed port (so it can come back)."""

    def __init__(self, store: Path, mode: str = "normal"):
        self.port = _free_port()
        self.store = store
        self.mode = mode
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Ingest:
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "fa_ingest.py"), str(self.port), str(self.store),
             self.mode], stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "ready"
        return self

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stored(self) -> list[dict]:
        if not self.store.exists():
            return []
        return [json.loads(line) for line in self.store.read_text().splitlines()]


@pytest.fixture
def ingest_factory(tmp_path: Path):
    started: list[Ingest] = []

    def make(mode: str = "normal") -> Ingest:
        ingest = Ingest(tmp_path / f"store-{mode}.jsonl", mode)
        started.append(ingest)
        return ingest
    yield make
    for ingest in started:
        ingest.stop()


def _spool(tmp_path: Path, max_reports: int = 100, max_bytes: int = 10 << 20) -> Spool:
    return Spool(tmp_path / "spool", max_reports, max_bytes, StateFile(tmp_path / "state.json"))


def _put(spool: Spool, n: int) -> list[str]:
    ids = []
    for i in range(n):
        rid = f"00000000-0000-4000-8000-{i:012d}"
        body = json.dumps({"report_id": rid, "collected_at": f"2026-11-29T10:00:{i:02d}Z"})
        spool.put(rid, gzip.compress(body.encode()))
        ids.append(rid)
    return ids


def _wait(predicate, timeout: float = 120.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError("condition not reached in time")
        time.sleep(0.1)


def test_the_dashboard_down_and_restarted_loses_nothing_and_stores_each_report_once(
        tmp_path: Path, ingest_factory) -> None:
    node = FakeNode(tmp_path / "root")
    node.add_vllm(["vllm", "serve", "google/gemma-4-31B-it", "--port", "1"], listen=(1,))
    ingest = ingest_factory()
    cfg = agent_config.AgentConfig(server_url=ingest.url, token="good-token", interval_s=1,
                                   spool_dir=str(tmp_path / "spool"))
    agent_config.save(cfg, tmp_path / "agent.toml")
    spool = _spool(tmp_path)
    agent = subprocess.Popen(
        [sys.executable, "-m", "fleet_agent.cli", "run", "--config", str(tmp_path / "agent.toml"),
         "--root", str(node.root), "--gpu-source", "none"],
        cwd=REPO, stderr=subprocess.PIPE, text=True)
    try:
        _wait(lambda: spool.depth() >= 3)          # dashboard down: reports pile up
        ingest.start()
        _wait(lambda: spool.depth() == 0 and len(ingest.stored()) >= 3)
        ingest.stop()                              # down again, then back
        _wait(lambda: spool.depth() >= 2)
        ingest.start()
        _wait(lambda: spool.depth() == 0)
    finally:
        agent.send_signal(signal.SIGTERM)
        _, err = agent.communicate(timeout=30)
    assert agent.returncode == 0
    created = re.findall(r"spooled report ([0-9a-f-]{36})", err)
    stored = [r["report_id"] for r in ingest.stored()]
    left = [e.report_id for e in spool.entries()]
    assert len(stored) == len(set(stored))                 # no duplicates stored
    assert stored + left == created                        # nothing lost, order kept
    assert len(stored) >= 5


def test_a_report_stored_without_an_answer_is_resent_and_kept_once(tmp_path, ingest_factory):
    ingest = ingest_factory("drop-first").start()
    spool = _spool(tmp_path)
    ids = _put(spool, 3)
    deliverer = Deliverer(spool, ingest.url, "good-token")
    summary = deliverer.drain(budget_s=20)
    deliverer.close()
    assert summary["delivered"] == 3 and spool.depth() == 0
    assert [r["report_id"] for r in ingest.stored()] == ids


def test_429_with_retry_after_is_waited_out_and_delivered(tmp_path, ingest_factory):
    ingest = ingest_factory("busy").start()
    spool = _spool(tmp_path)
    ids = _put(spool, 2)
    deliverer = Deliverer(spool, ingest.url, "good-token")
    summary = deliverer.drain(budget_s=20)
    deliverer.close()
    assert summary["outcome"] == "delivered"
    assert [r["report_id"] for r in ingest.stored()] == ids


def test_a_rejected_report_is_logged_and_dropped_not_retried(tmp_path, ingest_factory, caplog):
    ingest = ingest_factory("reject").start()
    spool = _spool(tmp_path)
    _put(spool, 2)
    deliverer = Deliverer(spool, ingest.url, "good-token")
    with caplog.at_level(logging.ERROR, logger="fleet_agent.deliver"):
        summary = deliverer.drain(budget_s=20)
    deliverer.close()
    assert summary["rejected"] == 2 and spool.depth() == 0 and ingest.stored() == []
    assert "servers[0].pid" in caplog.text and "422" in caplog.text
    assert spool.state.read()["last_delivery"]["outcome"] == "rejected"


def test_a_refused_token_keeps_the_spool_for_after_re_enrollment(tmp_path, ingest_factory):
    ingest = ingest_factory().start()
    spool = _spool(tmp_path)
    ids = _put(spool, 2)
    deliverer = Deliverer(spool, ingest.url, "revoked-token")
    assert deliverer.drain(budget_s=5)["outcome"] == "auth"
    assert [e.report_id for e in spool.entries()] == ids
    deliverer.token = "good-token"
    deliverer.drain(budget_s=5)
    deliverer.close()
    assert [r["report_id"] for r in ingest.stored()] == ids


def test_an_unreachable_dashboard_leaves_reports_spooled_in_order(tmp_path):
    spool = _spool(tmp_path)
    ids = _put(spool, 3)
    deliverer = Deliverer(spool, f"http://127.0.0.1:{_free_port()}", "good-token")
    summary = deliverer.drain(budget_s=0.5)
    deliverer.close()
    assert summary["outcome"] == "transient"
    assert [e.report_id for e in spool.entries()] == ids


def test_a_full_spool_drops_the_oldest_and_counts_them(tmp_path):
    spool = _spool(tmp_path, max_reports=3)
    ids = _put(spool, 5)
    assert [e.report_id for e in spool.entries()] == ids[2:]
    assert spool.dropped() == 2
    assert _spool(tmp_path).dropped() == 2  # persisted


def test_the_spool_is_bounded_by_bytes_too(tmp_path):
    spool = _spool(tmp_path, max_bytes=1)
    ids = _put(spool, 3)
    assert [e.report_id for e in spool.entries()] == ids[-1:]


def test_the_drop_counter_reaches_the_next_report(tmp_path):
    from fleet_agent.runner import Agent

    node = FakeNode(tmp_path / "root")
    cfg = agent_config.AgentConfig(spool_dir=str(tmp_path / "spool"), spool_max_reports=2)
    agent = Agent(cfg, node.root, "none")
    spool = agent.spool()
    _put(spool, 4)
    report = agent.build_report(spool)
    assert report.agent.spool_dropped == 2 and report.agent.spool_depth == 2


def test_an_oversized_report_loses_runtime_families_before_vllm_ones():
    vllm = "".join(f'vllm:num_requests_running{{engine="{i}"}} 1\n' for i in range(2000))
    noise = "".join(f'http_requests_total{{handler="/h{i}",method="GET"}} {i}\n'
                    for i in range(200_000))
    data = {"servers": [{"metrics": {"text": "# HELP python_gc x\npython_gc 1\n" + noise + vllm},
                         "errors": []}]}
    assert trim.report_size(data) > MAX_REPORT_BYTES
    trim.fit(data)
    text = data["servers"][0]["metrics"]["text"]
    assert trim.report_size(data) <= MAX_REPORT_BYTES
    assert text == vllm
    assert "python_*/process_*/http_*" in data["servers"][0]["errors"][0]


def test_a_retry_after_longer_than_the_cycle_pauses_later_cycles(tmp_path, ingest_factory):
    ingest = ingest_factory("busy").start()
    spool = _spool(tmp_path)
    ids = _put(spool, 1)
    deliverer = Deliverer(spool, ingest.url, "good-token")
    assert deliverer.drain(budget_s=0.2)["outcome"] == "transient"
    assert deliverer.drain(budget_s=0.2)["outcome"] == "waiting"  # no POST while asked to wait
    _wait(lambda: time.time() >= spool.state.read()["not_before"])
    summary = deliverer.drain(budget_s=20)
    deliverer.close()
    assert summary["outcome"] == "delivered"
    assert [r["report_id"] for r in ingest.stored()] == ids


def test_spool_order_survives_a_clock_that_steps_back(tmp_path):
    spool = _spool(tmp_path)
    spool.dir.mkdir(parents=True)
    rid = "00000000-0000-4000-8000-0000000000aa"
    future = spool.dir / f"{(time.time_ns() + 10**12):020d}-{rid}.json.gz"  # written "later"
    future.write_bytes(gzip.compress(b"{}"))
    (new_id,) = _put(spool, 1)
    assert [e.report_id for e in spool.entries()] == [rid, new_id]



def test_the_dashboard_client_ignores_proxy_environment_variables(monkeypatch):
    """HTTP(S)_PROXY in the agent's environment must not reroute reports
    (and the host token) through someone else's proxy."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from fleet_agent.deliver import make_client, post_report

    seen: list[str] = []

    class Dashboard(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            self.rfile.read(int(self.headers["Content-Length"]))
            seen.append(self.path)
            self.send_response(202)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Dashboard)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with socket.socket() as closed:  # a proxy address nothing listens on
        closed.bind(("127.0.0.1", 0))
        proxy = f"http://127.0.0.1:{closed.getsockname()[1]}"
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "all_proxy"):
        monkeypatch.setenv(name, proxy)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    try:
        with make_client() as client:
            post_report(client, f"http://127.0.0.1:{server.server_address[1]}", "fat_x",
                        gzip.compress(b"{}"))
    finally:
        server.shutdown()
    assert seen == ["/api/v1/reports"]


@pytest.mark.parametrize("status", [502, 413])
def test_a_proxy_error_on_an_over_size_body_sets_the_report_aside(tmp_path, status):
    """A body over the cap answered 413 by ingest reached the agent through Caddy as a 502
    (ingest answered before reading it; the proxy's pipe broke). Either way it is rejected
    (moved aside) in one cycle, and the report behind it is delivered."""
    import httpx

    big_id = "00000000-0000-4000-8000-00000000000b"
    small_id = "00000000-0000-4000-8000-00000000000c"
    big = gzip.compress(json.dumps({"report_id": big_id, "pad": "x" * (MAX_REPORT_BYTES + 10)})
                        .encode())
    spool = _spool(tmp_path, max_bytes=64 << 20)
    spool.put(big_id, big)
    spool.put(small_id, gzip.compress(json.dumps({"report_id": small_id}).encode()))
    seen: list[int] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(len(request.content))
        if len(request.content) == len(big):
            return httpx.Response(status, text="Bad Gateway" if status == 502 else "too big")
        return httpx.Response(202, json={"report_id": small_id, "duplicate": False})

    client = httpx.Client(transport=httpx.MockTransport(answer))
    deliverer = Deliverer(spool, "http://dashboard.invalid", "tok", client=client)
    summary = deliverer.drain(budget_s=20)
    assert (summary["rejected"], summary["delivered"], spool.depth()) == (1, 1, 0)
    assert seen.count(len(big)) == 1  # not retried
    assert (tmp_path / "spool" / "rejected").is_dir()


def test_a_502_to_a_normal_report_stays_transient(tmp_path):
    import httpx

    spool = _spool(tmp_path)
    _put(spool, 1)
    client = httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(502)))
    summary = Deliverer(spool, "http://dashboard.invalid", "tok", client=client).drain(0.5)
    assert summary["outcome"] == "transient" and spool.depth() == 1
