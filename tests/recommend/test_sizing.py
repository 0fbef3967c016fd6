"""The recommender sizes any model with a readable config from the memory budget:
TP, max_model_len and max_num_seqs, or a refusal that carries the numbers."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "audit"))
from test_modelcfg import _report_for  # noqa: E402

from advice.recommend.core import recommend_server  # noqa: E402


def _diff(out: dict) -> dict[str, dict]:
    return {row["flag"]: row for row in out["diff"]}


def test_a_context_the_pool_cannot_hold_is_lowered_with_the_arithmetic():
    report, server = _report_for(["vllm", "serve", "/m", "--tensor-parallel-size", "2",
                                  "--max-model-len", "131072"], "llama-3.1-70b", count=2)
    out = recommend_server(server, report)
    row = _diff(out)["--max-model-len"]
    assert int(row["recommended"]) < 131072
    assert "GiB for KV" in row["reason"] and "per token" in row["reason"]


def test_a_context_above_the_models_native_one_is_never_recommended():
    # Qwen3-30B-A3B's native context is 40960: a 262144 request is refused by vLLM, so the
    # command asks for no more than 40960 even where the pool would hold more.
    report, server = _report_for(["vllm", "serve", "/m", "--max-model-len", "262144"],
                                 "qwen3-30b-a3b")
    out = recommend_server(server, report)
    assert out["status"] == "ok"
    assert int(_diff(out)["--max-model-len"]["recommended"]) <= 40960


def test_the_smallest_tensor_parallel_size_that_fits_is_chosen():
    report, server = _report_for(["vllm", "serve", "/m"], "llama-3.1-70b", count=4)
    out = recommend_server(server, report)
    assert out["status"] == "ok"
    assert _diff(out)["--tensor-parallel-size"]["recommended"] == "2"


def test_a_model_that_cannot_fit_is_refused_with_its_numbers():
    report, server = _report_for(["vllm", "serve", "/m"], "deepseek-v3", count=1)
    out = recommend_server(server, report)
    assert out["status"] == "does_not_fit"
    numbers = out["does_not_fit"]["numbers"]
    assert numbers["weights_gib_per_gpu"] > numbers["budget_gib"]


def test_a_hybrid_models_max_num_seqs_goes_under_its_state_blocks():
    report, server = _report_for(["vllm", "serve", "/m", "--max-model-len", "131072",
                                  "--max-num-seqs", "1024"], "qwen3.5-35b-a3b")
    report["servers"][0]["model_files"]["config"]["quantization_config"] = {
        "quant_method": "fp8"}
    out = recommend_server(server, report)
    seqs = int(_diff(out)["--max-num-seqs"]["recommended"])
    assert 1 <= seqs < 1024


def test_a_gemma4_served_from_a_bare_path_keeps_its_gemma4_parsers():
    # the family comes from config.json, so the parsers are not "wrong"
    report, server = _report_for(["vllm", "serve", "/model", "--reasoning-parser", "gemma4",
                                  "--tool-call-parser", "gemma4", "--enable-auto-tool-choice"],
                                 "gemma-4-31b-it")
    out = recommend_server(server, report)
    diff = _diff(out)
    for flag in ("--reasoning-parser", "--tool-call-parser"):
        assert diff.get(flag, {}).get("recommended", "gemma4") == "gemma4", diff.get(flag)
