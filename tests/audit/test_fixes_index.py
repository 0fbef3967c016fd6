"""Fixes you lack: the shipped index, its feature tags, the finding, the upgrade plan and the
live GitHub path (a fake GitHub on 127.0.0.1 answering recorded API answers; never the
network)."""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from audit.kb import fixes

sys.path.insert(0, str(Path(__file__).resolve().parent))
import casekit  # noqa: E402

RECORDED = Path(__file__).resolve().parents[1] / "data" / "github-fixes"


@pytest.fixture(scope="module")
def kb():
    from audit.kb.engine import load_rules
    return load_rules()


def _report(tmp_path, version, gpu, argv, config):
    case = {"vllm_version": version, "gpus": [{"name": gpu, "count": 1}],
            "argv": ["vllm", "serve", *argv], "model_config": config}
    path = tmp_path / "900-synthetic.json"
    path.write_text(json.dumps(case))
    return casekit.case_to_report(path)


def _fired(kb, report):
    from audit.kb.context import build_contexts
    found = {}
    for ctx in build_contexts(report, []):
        found.update({f.rule_id: f for f in kb.evaluate(ctx)})
    return found


# --------------------------------------------------------------------------- index, tags

def test_the_index_is_real_prs_with_dates_and_specific_tags():
    entries = fixes.index()["fixes"]
    assert len(entries) >= 24
    for entry in entries:
        assert entry["url"] == f"https://github.com/vllm-project/vllm/pull/{entry['number']}"
        assert entry["date_kind"] in ("opened", "seen unmerged", "merged")
        assert any(entry["features"].get(k) for k in fixes.SUBJECTS + ("arch",)), entry
    assert fixes.first_release("2025-09-12") == "0.11.0"  # Qwen3-Next PP fix, #24709
    assert fixes.first_release("2099-01-01") is None


def test_tags_name_specific_features_never_a_common_word():
    assert fixes.tag("[BugFix] Fix Qwen3-Next PP") == {
        "arch": ["Qwen3NextForCausalLM"], "flags": ["pipeline_parallel_size"]}
    assert fixes.tag("[Bugfix] Mistral tool parser streaming update") == {
        "parser": ["mistral"]}
    fp8_kv = fixes.tag("[Kernel] Add FP8 KV cache support to Triton MLA decode attention")
    assert fp8_kv == {"attention": ["TRITON_MLA"], "kv": ["fp8"]}
    # "non-sm100 GPUs" is no sm100 scope
    assert "gpu" not in fixes.tag("[Bugfix] Enable FP8 KV cache for FlashInfer on non-sm100")
    assert fixes.tag("[Bugfix] Fix a typo in the error message") == {}
    assert fixes.tag("Fix the attention backend test") == {}


def test_a_fix_touches_a_server_only_through_a_feature_it_runs():
    fix = {"attention": ["FLASHINFER"], "gpu": ["sm100"]}
    server = {"attention": {"FLASHINFER"}, "gpu": {"sm100"}, "arch": set()}
    assert fixes.touches(fix, server) == ["attention FLASHINFER"]
    assert fixes.touches(fix, {**server, "gpu": {"sm90"}}) == []  # another GPU class
    assert fixes.touches(fix, {**server, "attention": {"FLASH_ATTN"}}) == []
    assert fixes.touches({"gpu": ["sm100"]}, server) == []  # a GPU alone touches no one


# --------------------------------------------------------------------------- finding, plan

def test_a_server_gets_one_low_finding_listing_the_fixes_its_release_lacks(kb, tmp_path):
    report = _report(tmp_path, "0.10.0", "NVIDIA H100 80GB HBM3",
                     ["Qwen/Qwen3-Next-80B-A3B-Instruct", "--pipeline-parallel-size", "2"],
                     "qwen3-next-80b-a3b")
    finding = _fired(kb, report)["cap-fixes-you-lack"]
    assert finding.severity == "low"
    assert "#24709" in finding.message and "first in 0.11.0" in finding.message
    assert "https://github.com/vllm-project/vllm/pull/24709" in finding.message
    newer = _report(tmp_path, "0.11.0", "NVIDIA H100 80GB HBM3",
                    ["Qwen/Qwen3-Next-80B-A3B-Instruct", "--pipeline-parallel-size", "2"],
                    "qwen3-next-80b-a3b")
    assert "cap-fixes-you-lack" not in _fired(kb, newer)


def test_several_fixes_on_what_it_runs_make_it_medium(kb, tmp_path):
    # The qwen3_xml parser fix (#26345) and the FlashInfer-on-B200 pair (#27994, #36987):
    # FLASHINFER forced on a B200 on 0.11.0.
    report = _report(tmp_path, "0.11.0", "NVIDIA B200",
                     ["Qwen/Qwen3-30B-A3B", "--tool-call-parser", "qwen3_xml",
                      "--enable-auto-tool-choice", "--attention-backend", "FLASHINFER"],
                     "qwen3-30b-a3b")
    finding = _fired(kb, report)["cap-fixes-you-lack"]
    assert finding.severity == "medium"
    assert all(f"#{n}" in finding.message for n in (26345, 27994, 36987))


def test_a_fix_for_another_backend_or_attention_kind_does_not_touch_it():
    # #34597 is Triton MLA + FP8 KV: not a Llama (no MLA) with FP8 KV, whichever backend.
    fix = {"attention": ["TRITON_MLA"], "kv": ["fp8"]}
    llama = {"attention": set(), "kv": {"fp8"}, "mla": {"no"}, "arch": set()}
    assert fixes.touches(fix, llama) == []
    assert fixes.touches(fix, {**llama, "attention": {"FLASH_ATTN"}}) == []
    deepseek = {**llama, "mla": {"yes"}}
    assert fixes.touches(fix, deepseek) == ["kv fp8"]


def test_the_upgrade_plan_lists_the_fixes_the_move_brings(kb, tmp_path):
    from advice.planner import plan_server
    report = _report(tmp_path, "0.10.0", "NVIDIA H100 80GB HBM3",
                     ["Qwen/Qwen3-Next-80B-A3B-Instruct", "--pipeline-parallel-size", "2"],
                     "qwen3-next-80b-a3b")
    plan = plan_server(report["servers"][0], report, "0.11.0", kb=kb)
    assert [f["number"] for f in plan["brings_fixes"]] == [24709]
    assert plan_server(report["servers"][0], report, "0.10.0", kb=kb)["brings_fixes"] == []


# --------------------------------------------------------------------------- live path

class _Recorded(BaseHTTPRequestHandler):
    """Answers GitHub REST paths from tests/data/github-fixes (recorded answers)."""

    answers: dict = {}
    seen: list = []

    def do_GET(self):  # noqa: N802 (http.server's name)
        self.seen.append(self.path)
        status, body, headers = self.answers.get(self.path, (404, {"message": "Not Found"},
                                                             {}))
        data = json.dumps(body).encode()
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture()
def github(settings):
    recorded = json.loads((RECORDED / "release_v0.11.1.json").read_text())
    _Recorded.answers = {path: (200, body, {"X-RateLimit-Remaining": "4990"})
                         for path, body in recorded.items()}
    _Recorded.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorded)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    settings.AUDIT_UPSTREAM_API_URL = f"http://127.0.0.1:{server.server_port}"
    settings.GITHUB_TOKEN = ""
    yield _Recorded
    server.shutdown()


def test_the_live_path_reads_release_notes_prs_and_files(github):
    from audit.kb.fixes_live import release_fixes
    from audit.upstream import _client
    with _client() as client:
        entries = release_fixes(client, "v0.11.1")
    assert [e["number"] for e in entries] == [90001]  # 90002: no feature; 90003: not merged
    assert entries[0]["features"]["attention"] == ["FLASHINFER"]  # from its changed file
    assert entries[0]["date"] == "2025-10-20" and entries[0]["date_kind"] == "merged"
    assert "/repos/vllm-project/vllm/pulls/90004" not in github.seen  # not a fix line


def test_the_live_path_stops_on_githubs_rate_limit(github):
    from django.core.cache import cache

    from audit.kb.fixes_live import release_fixes
    from audit.upstream import PAUSE_KEY, _client, _Stop
    github.answers["/repos/vllm-project/vllm/pulls/90001"] = (
        403, {"message": "API rate limit exceeded"},
        {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "4102444800"})
    with _client() as client, pytest.raises(_Stop, match="rate limited"):
        release_fixes(client, "v0.11.1")
    assert cache.get(PAUSE_KEY) == 4102444800
    cache.delete(PAUSE_KEY)


def test_the_plan_says_when_the_planned_release_lacks_the_architecture(kb, tmp_path):
    from advice.planner import plan_server
    report = _report(tmp_path, "0.11.0", "NVIDIA H100 80GB HBM3",
                     ["Qwen/Qwen3-Next-80B-A3B-Instruct"], "qwen3-next-80b-a3b")
    plan = plan_server(report["servers"][0], report, "0.10.0", kb=kb)
    appear = {f["rule_id"]: f for f in plan["appear"]}
    assert "first known release registering it: 0.11.0" in \
        appear["cap-architecture-not-registered"]["message"]
    assert plan["verdict"] in ("risky", "blocked")
