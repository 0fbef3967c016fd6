"""Recommended configuration: operating points, does-not-fit, speculators, diff.

Every report is a contract dict (validated by fleet_agent.schema.parse_report in rkit).
Expected values come from the seed recipes and the GPU/geometry tables, read through the
library's data (audit/kb/data/operating_points.yaml, gpus.yaml, models.yaml).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from advice.recommend import recommend_report, recommend_server
from advice.recommend.data import recipe, unified
from audit.kb.context import build_context
from audit.kb.gpus import bandwidth_knee

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rkit import AWQ_31B, EAGLE3, host_report, prompt_metrics, serve  # noqa: E402

H100 = "NVIDIA H100 80GB HBM3"
PUSH_FLAGS = ("--tensor-parallel-size", "2", "--max-model-len", "262144",
              "--gpu-memory-utilization", "0.94", "--max-num-seqs", "256",
              "--kv-cache-dtype", "fp8", "--reasoning-parser", "gemma4",
              "--tool-call-parser", "gemma4", "--enable-auto-tool-choice",
              "--speculative-config", EAGLE3)


def _only(report: dict, workload: str | None = None) -> dict:
    result = recommend_report(report, workload=workload)
    assert len(result["servers"]) == 1
    return result["servers"][0]


def _flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def _recommended_context(item: dict, report: dict, replica: int = 0) -> dict:
    """Context of one recommended replica as if it ran on the host (independent of the
    library's own self-check)."""
    server = {"pid": 9000 + replica, "argv": item["replicas"][replica]["argv"],
              "gpu_uuids": item["replicas"][replica]["gpu_uuids"],
              "vllm_version": item["version"]["recommended"],
              "installed_vllm_version": item["version"]["recommended"],
              "chat_template": item["chat_template"], "metrics": None, "errors": []}
    return build_context(server, {**report, "servers": [server]}, None)


def test_two_h100_short_chat_prompts_become_two_tp1_replicas_at_the_knee() -> None:
    prompts = [900] * 300 + [2500] * 600 + [3800] * 100
    report = host_report(H100, 2, serve(AWQ_31B, *PUSH_FLAGS),
                         metrics=prompt_metrics(prompts, running=48))
    item = _only(report)
    assert item["workload"]["profile"] == "chat"
    assert "inferred from live metrics" in item["workload"]["source"]
    assert item["layout"] == "2 x TP=1"
    assert [r["gpus"] for r in item["replicas"]] == [[0], [1]]
    ports = [int(_flag(r["argv"], "--port")) for r in item["replicas"]]
    assert len(set(ports)) == 2
    for replica in item["replicas"]:
        # TP=1 is every release's default: the command leaves the flag out, the layout says it.
        assert "--tensor-parallel-size" not in replica["argv"]
        assert _flag(replica["argv"], "--max-num-seqs") == "64"
    assert any(f["figure"].startswith("output throughput") and f["value"] == 408
               and f["measured"] for f in item["expected"])


@pytest.mark.parametrize("gpu, count, memory", [(H100, 2, None),
                                                ("NVIDIA L40S", 2, None),
                                                ("NVIDIA GeForce RTX 4090", 2, None)])
def test_long_context_uses_tp2_and_the_full_context_only_when_kv_holds_it(
        gpu: str, count: int, memory: float | None) -> None:
    report = host_report(gpu, count, serve(AWQ_31B, "--max-model-len", "32768"),
                         memory_gib=memory)
    item = _only(report, "long-context")
    if item["status"] == "does_not_fit":
        assert item["does_not_fit"]["numbers"]["kv_gib_left"] is not None
        return
    assert item["layout"] == "1 x TP=2"
    ctx = _recommended_context(item, report)
    single = ctx["geometry"]["single_request_max_tokens_estimate"]
    length = int(_flag(item["replicas"][0]["argv"], "--max-model-len"))
    assert length <= 0.95 * single
    assert length <= 262144
    if 0.95 * single >= 262144:
        assert length == 262144
    else:
        assert length >= 0.95 * single - 1024


def test_h100_long_context_serves_262144_at_tp2() -> None:
    item = _only(host_report(H100, 2, serve(AWQ_31B)), "long-context")
    assert item["layout"] == "1 x TP=2"
    assert _flag(item["replicas"][0]["argv"], "--max-model-len") == "262144"


def test_one_h200_gets_the_h200_knee_of_128() -> None:
    report = host_report("NVIDIA H200", 1, serve(AWQ_31B, "--max-num-seqs", "512"))
    item = _only(report, "chat")
    argv = item["replicas"][0]["argv"]
    assert _flag(argv, "--max-num-seqs") == str(bandwidth_knee(4.8)) == "128"
    row = next(r for r in item["diff"] if r["flag"] == "--max-num-seqs")
    assert row["current"] == "512" and row["recommended"] == "128"


def test_gb10_26b_nvfp4_with_mtp_follows_the_measured_unified_memory_recipe() -> None:
    mtp = ('{"method":"mtp","model":"google/gemma-4-26B-A4B-it-assistant",'
           '"num_speculative_tokens":3}')
    argv = serve("nvidia/Gemma-4-26B-A4B-NVFP4", "--max-model-len", "65536",
                 "--gpu-memory-utilization", "0.9", "--max-num-seqs", "256",
                 "--speculative-config", mtp)
    report = host_report("NVIDIA GB10", 1, argv, version="0.23.0", memory_gib=121)
    item = _only(report)
    assert item["status"] == "ok"
    out = item["replicas"][0]["argv"]
    assert float(_flag(out, "--gpu-memory-utilization")) == unified("gpu_memory_utilization")[0]
    assert int(_flag(out, "--max-model-len")) == 65536
    assert int(_flag(out, "--max-num-seqs")) <= 128
    assert json.loads(_flag(out, "--speculative-config"))["method"] == "mtp"
    assert _flag(out, "--kv-cache-dtype") is None  # fp8 KV breaks the MTP drafter's scales
    assert any(f["value"] == 1380 and f["measured"] for f in item["expected"])
    # MTP crashes at init on 0.24-0.25 (rule up-gemma4-mtp-embedding-guard-init-crash): the
    # answer says which release the drafter costs.
    assert item["version"]["recommended"] == "0.23.0"
    assert any("MTP keeps this command on vLLM 0.23.0" in n for n in item["notes"])


def test_31b_awq_on_a_16gb_rtx_4060_ti_does_not_fit_and_shows_the_numbers() -> None:
    report = host_report("NVIDIA GeForce RTX 4060 Ti", 1, serve(AWQ_31B), version="0.25.1")
    item = _only(report)
    assert item["status"] == "does_not_fit"
    assert item["replicas"] == []
    numbers = item["does_not_fit"]["numbers"]
    assert numbers["weights_gib_per_gpu"] > numbers["budget_gib"]
    assert numbers["kv_gib_left"] <= 0
    text = " ".join(item["notes"])
    assert "does not fit" in text
    assert str(numbers["weights_gib_per_gpu"]) in text and str(numbers["budget_gib"]) in text


def test_awq_target_running_mtp_is_moved_to_eagle3_citing_the_zero_acceptance_run() -> None:
    mtp = '{"method":"mtp","model":"google/gemma-4-31B-it-assistant","num_speculative_tokens":4}'
    report = host_report(H100, 1, serve(AWQ_31B, "--speculative-config", mtp),
                         version="0.23.0")
    item = _only(report, "chat")
    config = json.loads(_flag(item["replicas"][0]["argv"], "--speculative-config"))
    assert config["method"] == "eagle3"
    assert "parallel_drafting" not in config
    row = next(r for r in item["diff"] if r["flag"] == "--speculative-config")
    assert "0% acceptance" in row["reason"]
    assert any("0% acceptance on quantized targets" in ref for ref in row["references"])
    assert "extrapolated" in row["reason"]  # k=3 vs 2 was never measured (R6)


def test_an_unset_flag_shows_the_running_versions_default_marked_as_such() -> None:
    report = host_report(H100, 1, serve(AWQ_31B), version="0.19.1")
    item = _only(report, "chat")
    row = next(r for r in item["diff"] if r["flag"] == "--gpu-memory-utilization")
    assert row["current"] == "0.9 (vLLM 0.19.1 default)"  # 0.92 from 0.20.0 (wheel table)
    assert row["current_is_default"] is True
    seqs = next(r for r in item["diff"] if r["flag"] == "--max-num-seqs")
    assert seqs["current"].startswith("1024 (vLLM 0.19.1 default")


def test_the_docker_form_runs_the_recommended_release_on_the_replicas_gpus() -> None:
    report = host_report(H100, 2, serve(AWQ_31B, *PUSH_FLAGS), version="0.27.1")
    item = _only(report, "chat")
    assert item["version"]["recommended"] == "0.25.1"
    docker = item["replicas"][1]["docker"]
    assert "vllm/vllm-openai:v0.25.1" in docker
    assert '"device=1"' in docker
    assert any(r["flag"] == "vLLM version" and r["recommended"] == "0.25.1"
               for r in item["diff"])


def test_long_prompts_in_the_histogram_are_read_as_long_context() -> None:
    prompts = [20000] * 700 + [60000] * 300
    report = host_report(H100, 2, serve(AWQ_31B), metrics=prompt_metrics(prompts, 12))
    assert _only(report)["workload"]["profile"] == "long-context"


def test_the_operator_workload_overrides_the_inference() -> None:
    prompts = [20000] * 1000
    report = host_report(H100, 2, serve(AWQ_31B), metrics=prompt_metrics(prompts, 12))
    item = _only(report, "chat")
    assert item["workload"] == {**item["workload"], "profile": "chat",
                                "source": "set by the operator"}
    assert item["layout"] == "2 x TP=1"


def test_an_unknown_workload_is_refused() -> None:
    report = host_report(H100, 1, serve(AWQ_31B))
    with pytest.raises(ValueError, match="unknown workload"):
        recommend_server(report["servers"][0], report, workload="batch")


def test_the_seed_push_recipe_is_recommended_back_for_long_context() -> None:
    push = recipe("PUSH")
    item = _only(host_report(H100, 2, serve(AWQ_31B, *PUSH_FLAGS)), "long-context")
    argv = item["replicas"][0]["argv"]
    assert float(_flag(argv, "--gpu-memory-utilization")) == push["gpu_memory_utilization"]
    assert int(_flag(argv, "--max-num-batched-tokens")) == push["max_num_batched_tokens"]
    assert any(f["value"] == 284 for f in item["expected"])


def test_the_paste_ready_commands_keep_json_flags_intact_in_a_shell() -> None:
    import shlex

    report = host_report(H100, 2, serve(AWQ_31B, *PUSH_FLAGS))
    for replica in _only(report)["replicas"]:
        env, *words = shlex.split(replica["command"])
        assert env.startswith("CUDA_VISIBLE_DEVICES=")
        assert words == replica["argv"]
        spec = json.loads(_flag(words, "--speculative-config"))
        assert spec["method"] == "eagle3"
        docker = replica["docker_command"]
        assert '"$HOME/.cache/huggingface:/root/.cache/huggingface"' in docker
        assert json.loads(_flag(shlex.split(docker), "--speculative-config")) == spec
