"""Model-fit rules (the mf-* rules) on reports built from real public reports: each
rule fires on its report and stays silent on the near miss the same report describes.

Case files: tests/audit/model_cases/*.json, the tests/audit/more_cases format plus
``model_config`` (the tests/data/model_configs fixture the agent would have read) and
``near_miss`` (what changes in the report that worked). Scenarios without a case file are
built from the reports they cite with a model whose real config is in the fixtures (named in
each test)."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from audit.kb.context import build_contexts
from audit.kb.engine import load_rules

sys.path.insert(0, str(Path(__file__).resolve().parent))
import casekit  # noqa: E402

CASES = Path(__file__).resolve().parent / "model_cases"
EXPECTED = {"201": ("mf-weights-do-not-fit", "critical"),
            "202": ("mf-max-model-len-above-kv-pool", "high"),
            "203": ("mf-mxfp4-below-ampere", "critical"),
            "204": ("mf-forced-attention-backend-cannot-serve", "critical"),
            "205": ("mf-mxfp4-below-ampere", "critical"),
            "206": ("mf-max-model-len-above-kv-pool", "high"),
            "207": ("mf-weights-do-not-fit", "critical"),
            "208": ("mf-mxfp4-below-ampere", "critical")}
H100 = {"name": "NVIDIA H100 80GB HBM3", "memory_gib": 79.2, "count": 1}


@pytest.fixture(scope="module")
def kb():
    return load_rules()


def _fired(kb, report: dict[str, Any]) -> dict[str, Any]:
    fired: dict[str, Any] = {}
    for ctx in build_contexts(report, []):
        evaluation = kb.evaluate(ctx)
        assert not evaluation.failures, evaluation.failures
        fired.update({f.rule_id: f for f in evaluation})
    return fired


def _write(tmp_path: Path, case: dict[str, Any], name: str) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(case))
    return path


def _near_miss(case: dict[str, Any]) -> dict[str, Any]:
    near = copy.deepcopy(case)
    change = case["near_miss"]
    if "argv" in change:
        near["argv"] = change["argv"]
    if "gpu_count" in change:
        near["gpus"][0]["count"] = change["gpu_count"]
    if "gpu" in change:
        near["gpus"][0]["name"] = change["gpu"]
    return near


def test_every_model_case_has_an_expectation_source_and_near_miss():
    paths = sorted(CASES.glob("*.json"))
    assert {p.name.split("-", 1)[0] for p in paths} == set(EXPECTED)
    for path in paths:
        case = json.loads(path.read_text())
        assert case["source_url"].startswith("https://github.com/vllm-project/")
        assert case["near_miss"]["why"]


@pytest.mark.parametrize("path", sorted(CASES.glob("*.json")), ids=lambda p: p.stem)
def test_the_rule_fires_on_the_report_and_not_on_its_near_miss(kb, path, tmp_path):
    rule_id, severity = EXPECTED[path.name.split("-", 1)[0]]
    case = json.loads(path.read_text())
    fired = _fired(kb, casekit.case_to_report(path))
    assert rule_id in fired, sorted(fired)
    assert fired[rule_id].severity == severity
    assert fired[rule_id].references and fired[rule_id].message
    near = _write(tmp_path, _near_miss(case), path.name)
    assert rule_id not in _fired(kb, casekit.case_to_report(near))


def test_the_kv_pool_finding_shows_the_numbers(kb):
    path = next(CASES.glob("202-*.json"))
    finding = _fired(kb, casekit.case_to_report(path))["mf-max-model-len-above-kv-pool"]
    assert "29000" in finding.message and "GiB for KV" in finding.message


def _scenario(tmp_path: Path, argv: list[str], config: str, version: str, gpus: list[dict],
              name: str = "300-scenario.json") -> dict[str, Any]:
    case = {"source_url": "https://github.com/vllm-project/vllm", "vllm_version": version,
            "gpus": gpus, "argv": argv, "env": {}, "model_config": config}
    return casekit.case_to_report(_write(tmp_path, case, name))


def test_hybrid_default_max_num_seqs_above_the_state_blocks(kb, tmp_path):
    # vllm#49064: a Qwen3.x hybrid (gated delta-net) on one H100 at --max-model-len 132000,
    # util 0.90 and the default max_num_seqs 1024 stops at start-up. Modelled here with
    # Qwen3.5-35B-A3B-FP8, whose real config is in the fixtures (the 27B is not).
    argv = ["vllm", "serve", "Qwen/Qwen3.5-35B-A3B-FP8", "--max-model-len", "132000",
            "--gpu-memory-utilization", "0.90"]
    fired = _fired(kb, _scenario(tmp_path, argv, "qwen3.5-35b-a3b", "0.28.0", [H100]))
    assert "mf-hybrid-max-num-seqs-above-state-blocks" in fired
    # the fix of recipes#551 / the issue: a max_num_seqs under the block count
    quiet = _fired(kb, _scenario(tmp_path, [*argv, "--max-num-seqs", "256"],
                                 "qwen3.5-35b-a3b", "0.28.0", [H100]))
    assert "mf-hybrid-max-num-seqs-above-state-blocks" not in quiet


def test_chunked_prefill_off_with_a_long_context_fails_the_profile_run(kb, tmp_path):
    # PR #6666 turned chunked prefill on by default above 32K because the profiling prompt
    # of a long max_model_len OOMed; here Llama 3.1 8B on an RTX 3090 (as in vllm#10517).
    gpu = [{"name": "NVIDIA GeForce RTX 3090", "memory_gib": 23.58, "count": 1}]
    argv = ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "131072"]
    off = _fired(kb, _scenario(tmp_path, [*argv, "--no-enable-chunked-prefill"],
                               "llama-3.1-8b", "0.11.0", gpu))
    assert "mf-chunked-prefill-off-profile-oom" in off
    on = _fired(kb, _scenario(tmp_path, argv, "llama-3.1-8b", "0.11.0", gpu))
    assert "mf-chunked-prefill-off-profile-oom" not in on


def _with_engine_pool(report: dict[str, Any], blocks: int,
                      concurrency: str = "None") -> dict[str, Any]:
    report["servers"][0]["metrics"] = {
        "format": "prometheus-text", "scraped_at": casekit.COLLECTED_AT,
        "text": ('# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{block_size="16",'
                 f'cache_dtype="auto",engine="0",kv_cache_max_concurrency="{concurrency}",'
                 f'num_gpu_blocks="{blocks}"}} 1.0\n')}
    return report


def test_a_max_model_len_above_the_engines_pool_is_the_39734_wedge(kb, tmp_path):
    # vllm#39734: requests above what the pool holds but within max_model_len are admitted
    # and block the queue. Llama 3.1 8B is full attention: one token of request, one token
    # of pool.
    argv = ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "131072"]
    report = _scenario(tmp_path, argv, "llama-3.1-8b", "0.19.1", [H100])
    fired = _fired(kb, _with_engine_pool(report, 5000))  # 80000 tokens
    assert "mf-request-above-engine-kv-pool" in fired
    assert "80,000 tokens" in fired["mf-request-above-engine-kv-pool"].message
    report = _scenario(tmp_path, argv, "llama-3.1-8b", "0.19.1", [H100])
    assert "mf-request-above-engine-kv-pool" not in _fired(kb, _with_engine_pool(report, 9000))


def test_a_sliding_window_hybrid_is_judged_by_its_requests_need_not_its_pool_tokens(kb,
                                                                                   tmp_path):
    # Gemma 4 31B: 50 of 60 layers slide over 1024 tokens, so a 262144-token request needs
    # far less than 262144 tokens of pool. The engine's "Maximum concurrency" decides.
    argv = ["vllm", "serve", "google/gemma-4-31B-it", "--max-model-len", "262144"]
    report = _scenario(tmp_path, argv, "gemma-4-31b-it", "0.19.1", [H100])
    # 144,000 pool tokens: below max_model_len, yet the engine says 1.53 requests fit
    assert "mf-request-above-engine-kv-pool" not in _fired(
        kb, _with_engine_pool(report, 9000, "1.53"))
    report = _scenario(tmp_path, argv, "gemma-4-31b-it", "0.19.1", [H100])
    fired = _fired(kb, _with_engine_pool(report, 9000, "0.6"))
    assert "mf-request-above-engine-kv-pool" in fired
    assert "0.6x" in fired["mf-request-above-engine-kv-pool"].message
    # without the engine's concurrency, the pool with the hybrid arithmetic: 144,000 pool
    # tokens hold a 262144-token request (sliding layers capped at window + one chunk) ...
    report = _scenario(tmp_path, argv, "gemma-4-31b-it", "0.19.1", [H100])
    assert "mf-request-above-engine-kv-pool" not in _fired(kb, _with_engine_pool(report, 9000))
    # ... 8,000 pool tokens do not
    report = _scenario(tmp_path, argv, "gemma-4-31b-it", "0.19.1", [H100])
    assert "mf-request-above-engine-kv-pool" in _fired(kb, _with_engine_pool(report, 500))


def test_weights_rule_replaces_the_headroom_rule_when_nothing_fits(kb):
    path = next(CASES.glob("201-*.json"))
    fired = _fired(kb, casekit.case_to_report(path))
    assert "up-weights-leave-no-kv-headroom" not in fired


def test_backend_limits_are_data_and_name_the_backends_that_would_serve():
    from audit.kb.backends import attention_block
    from audit.kb.modelcfg import geometry_from_config

    def arch(name):
        config = json.loads((casekit.MODEL_CONFIGS / f"{name}.json").read_text())
        return geometry_from_config(config)

    mla = attention_block("flash_attn", arch("deepseek-v3"), 9.0, None, "0.28.0")
    assert mla["can_serve"] is False and "MLA" in mla["problems"][0]
    assert "TRITON_MLA" in mla["would_serve"] and "FLASH_ATTN" not in mla["would_serve"]
    volta = attention_block("FLASH_ATTN", arch("llama-3.1-8b"), 7.0, None, "0.28.0")
    assert "compute capability 8.0" in volta["problems"][0]
    # 0.26's FlashAttentionBackend leaves fp8 KV to the installed FlashAttention 3 (run
    # time): not a stated limit. FlexAttention's supported_kv_cache_dtypes has no fp8.
    assert attention_block("FLASH_ATTN", arch("llama-3.1-8b"), 9.0, "fp8", "0.26.0")[
        "can_serve"] is True
    flex = attention_block("FLEX_ATTENTION", arch("llama-3.1-8b"), 9.0, "fp8", "0.28.0")
    assert flex["can_serve"] is False and "KV-cache dtype fp8" in flex["problems"][0]
    # 0.8.5's backend class states no compute capability: the hand fact (vllm#13398) applies.
    old_volta = attention_block("FLASH_ATTN", arch("llama-3.1-8b"), 7.0, None, "0.8.5")
    assert "compute capability 8.0" in old_volta["problems"][0]
    # A backend the running release does not have names the first release with it.
    missing = attention_block("FLASHMLA_SPARSE", arch("deepseek-v3"), 9.0, None, "0.8.5")
    assert missing["can_serve"] is False and "first known release with it" in \
        missing["problems"][0]
    assert attention_block(None, arch("llama-3.1-8b"), 9.0, None, "0.28.0")["can_serve"] is None


def test_a_family_specific_parser_on_another_family_is_a_finding(kb, tmp_path):
    # recipes#551 serves Qwen3.6 with --tool-call-parser qwen3_coder --reasoning-parser qwen3;
    # the same flags on a Llama 3.1 (decided from its config.json) are the wrong family.
    flags = ["--enable-auto-tool-choice", "--tool-call-parser", "qwen3_coder",
             "--reasoning-parser", "qwen3"]
    wrong = _fired(kb, _scenario(tmp_path, ["vllm", "serve", "/models/m", *flags],
                                 "llama-3.1-8b", "0.28.0", [H100]))
    finding = wrong["mf-parser-family-mismatch"]
    assert "qwen3_coder" in finding.message and "llama" in finding.message
    right = _fired(kb, _scenario(tmp_path, ["vllm", "serve", "/models/m", *flags],
                                 "qwen3.5-35b-a3b", "0.28.0", [H100]))
    assert "mf-parser-family-mismatch" not in right
    distill = _fired(kb, _scenario(tmp_path, ["vllm", "serve", "/models/m",
                                              "--reasoning-parser", "deepseek_r1"],
                                   "llama-3.1-8b", "0.28.0", [H100]))
    assert "mf-parser-family-mismatch" not in distill  # R1 distills of Llama use it
