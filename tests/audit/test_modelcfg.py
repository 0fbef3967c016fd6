"""Geometry, memory budget and the model decision for any decoder model, checked
against real config.json facts (tests/data/model_configs) and published figures."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from audit.kb.catalogue import decide, params_from_name
from audit.kb.context import build_context
from audit.kb.memory import derived_max_model_len, memory_budget
from audit.kb.modelcfg import geometry_from_config

sys.path.insert(0, str(Path(__file__).resolve().parent))
import casekit  # noqa: E402

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "model_configs"


def _cfg(name: str) -> dict:
    config = json.loads((CONFIGS / f"{name}.json").read_text())
    assert config.pop("_source")["config_url"].startswith("https://huggingface.co/")
    return config


def _geom(name: str) -> dict:
    return geometry_from_config(_cfg(name))


def test_at_least_fifteen_real_configs_across_the_families_are_shipped():
    names = sorted(p.stem for p in CONFIGS.glob("*.json"))
    assert len(names) >= 15
    for family in ("gemma-4", "qwen2.5", "qwen3-", "qwen3.5", "llama-3", "mistral", "mixtral",
                   "deepseek-v3", "deepseek-r1", "glm-4.5", "gpt-oss", "kimi-k2", "minimax"):
        assert any(n.startswith(family) for n in names), family


# Published figures: layers, KV heads, head dims and parameter counts from the model cards
# (Qwen3-30B-A3B: 48 layers, 4 KV heads, 30.5B/3.3B; Qwen3-235B-A22B 235B/22B; DeepSeek-V3
# 671B/37B; Llama 3.1 8B/70B; gpt-oss-20b 21B/3.6B; Qwen3-Next-80B-A3B 80B/3B).
@pytest.mark.parametrize("name,layers,kv,dims,total,active", [
    ("qwen3-30b-a3b", 48, 4, [128], 30.5, 3.3),
    ("qwen3-235b-a22b", 94, 4, [128], 235.0, 22.0),
    ("qwen3-8b", 36, 8, [128], 8.2, 8.2),
    ("llama-3.1-8b", 32, 8, [128], 8.03, 8.03),
    ("llama-3.1-70b", 80, 8, [128], 70.6, 70.6),
    ("gpt-oss-20b", 24, 8, [64], 21.0, 3.6),
    ("qwen3-next-80b-a3b", 48, 2, [256], 80.0, 3.0),
])
def test_geometry_and_parameters_match_the_published_figures(name, layers, kv, dims, total,
                                                             active):
    geom = _geom(name)
    assert (geom["layers"], geom["kv_heads"], geom["head_dims"]) == (layers, kv, dims)
    assert geom["params_b"] == pytest.approx(total, rel=0.03)
    # active counts include the embeddings, which model cards often leave out
    assert geom["active_params_b"] == pytest.approx(active, rel=0.3)


def test_mla_models_cache_a_latent_and_deepseek_v32_is_sparse():
    for name in ("deepseek-v3", "deepseek-r1", "kimi-k2", "deepseek-v3.2"):
        geom = _geom(name)
        assert geom["is_mla"] and geom["layer_counts"]["mla"] == 61
        assert (geom["kv_lora_rank"], geom["qk_rope_head_dim"]) == (512, 64)
    assert _geom("deepseek-v3.2")["is_sparse_mla"] and not _geom("deepseek-v3")["is_sparse_mla"]
    assert _geom("deepseek-v3")["params_b"] == pytest.approx(671, rel=0.01)


def test_layer_kinds_sliding_hybrid_and_heterogeneous_heads():
    gemma = _geom("gemma-4-31b-it")
    assert gemma["layer_counts"]["sliding"] == 50 and gemma["layer_counts"]["full"] == 10
    assert gemma["head_dims"] == [256, 512] and gemma["heterogeneous_head_dim"]
    assert gemma["multimodal"] and gemma["sliding_window"] == 1024
    oss = _geom("gpt-oss-20b")
    assert oss["layer_counts"]["sliding"] == oss["layer_counts"]["full"] == 12
    assert _geom("mistral-7b-v0.1")["layer_counts"]["sliding"] == 32
    assert _geom("qwen2.5-72b")["layer_counts"]["full"] == 80  # use_sliding_window false
    for name, linear in (("qwen3-next-80b-a3b", 36), ("qwen3.5-35b-a3b", 30)):
        geom = _geom(name)
        assert geom["is_hybrid"] and geom["layer_counts"]["linear"] == linear
        assert geom["ssm_state_elements"] == 32 * 128 * 128  # value heads x dk x dv


def test_native_context_and_rope_scaling_give_vllms_default_max_model_len():
    assert derived_max_model_len(_geom("qwen2.5-72b")) == 32768
    assert derived_max_model_len(_geom("llama-3.1-8b")) == 131072  # llama3 rope already in
    assert derived_max_model_len(_geom("deepseek-v3")) == 4096 * 40  # YaRN: original x factor
    yarn = {"rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                             "original_max_position_embeddings": 32768}}
    assert derived_max_model_len(_geom("qwen2.5-72b"), yarn) == 131072


def _budget(name: str, **kw) -> dict:
    geom = _geom(name)
    args = dict(weights_bytes=None, quant="bf16", drafter_bytes=None, tp=1, pp=1,
                memory_gib=79.6, util=0.9, kv_cache_dtype=None,
                max_model_len=derived_max_model_len(geom), max_num_batched_tokens=2048,
                chunked_prefill=True, block_size=16)
    args.update(kw)
    return memory_budget(geom, **args)


def test_kv_bytes_per_token_follow_the_layer_kinds():
    assert _budget("llama-3.1-8b")["kv_bytes_per_token"] == 32 * 2 * 8 * 128 * 2
    assert _budget("llama-3.1-8b", tp=2)["kv_bytes_per_token"] == 32 * 2 * 4 * 128 * 2
    # MLA latent is replicated on every rank, fp8 halves it
    assert _budget("deepseek-v3", tp=8, kv_cache_dtype="fp8",
                   quant="fp8")["kv_bytes_per_token"] == 61 * 576
    qwen35 = _budget("qwen3.5-35b-a3b")
    assert qwen35["kv_bytes_per_token"] == 10 * 2 * 2 * 256 * 2  # only the 10 full layers
    assert qwen35["state_bytes_per_seq"] > 0 and qwen35["state_capacity_seqs"] > 0


def test_budget_shows_its_arithmetic_and_a_bar_that_adds_up():
    budget = _budget("qwen3-30b-a3b", weights_bytes=61_064_245_248)
    assert budget["weights_source"] == "weights_bytes reported by the node"
    assert budget["weights_gib"] == pytest.approx(56.87, abs=0.01)
    assert "GiB for KV" in budget["arithmetic"][0]
    assert sum(p["gib"] for p in budget["bar"]) == pytest.approx(79.6, abs=0.05)
    assert budget["fits_weights"] and budget["fits_one_request"] is True
    assert budget["request_gib"] == pytest.approx(40960 * 48 * 2 * 4 * 128 * 2 / 2**30, rel=1e-3)


def test_weights_that_do_not_fit_and_an_estimate_from_parameters():
    budget = _budget("llama-3.1-70b", memory_gib=79.6, util=0.9)
    assert budget["estimate"] and budget["fits_weights"] is False
    assert _budget("llama-3.1-70b", tp=4)["fits_weights"] is True


def test_chunked_prefill_off_profiles_a_whole_max_model_len_prompt():
    on = _budget("llama-3.1-8b", max_model_len=131072)
    off = _budget("llama-3.1-8b", max_model_len=131072, chunked_prefill=False)
    assert off["profile_tokens"] == 131072 and off["activation_gib"] > 10 * on["activation_gib"]


def test_engine_cache_config_is_shown_next_to_the_estimate():
    budget = _budget("llama-3.1-8b", engine_cache={"num_gpu_blocks": "27000", "block_size": "16"})
    assert budget["engine_kv_tokens"] == 432000
    assert budget["engine_vs_estimate"] == pytest.approx(
        432000 / budget["kv_capacity_tokens"], rel=0.01)


def test_family_is_decided_from_config_first_then_name():
    gemma = _cfg("gemma-4-31b-it")
    decision = decide(gemma, ["/model"])
    assert decision["family"] == "gemma4-31b"
    assert "model_type gemma4" in decision["family_source"]
    assert decide(None, ["Qwen/Qwen3-235B-A22B-FP8"])["family"] == "qwen3"
    assert decide(None, ["/srv/weights"])["family"] is None
    assert params_from_name("Qwen/Qwen3-30B-A3B-FP8") == (30.0, 3.0)
    assert params_from_name("meta-llama/Llama-3.1-8B-Instruct") == (8.0, None)


def _report_for(argv: list[str], config: str | None, gpu: str = "NVIDIA H100 80GB HBM3",
                count: int = 1) -> tuple[dict, dict]:
    report = casekit.report_skeleton("h", [
        {"index": i, "uuid": f"GPU-{i}", "name": gpu, "memory_total_bytes": 85520809984,
         "compute_capability": "9.0"} for i in range(count)])
    server = casekit.server_entry(argv, "0.19.0", gpu_uuids=[f"GPU-{i}" for i in range(count)])
    if config:
        server["model_files"] = casekit.model_files_of({"model_config": config})
    report["servers"].append(server)
    return report, server


def test_a_gemma4_served_from_a_bare_path_is_gemma4_for_every_rule():
    report, server = _report_for(["vllm", "serve", "/model", "--reasoning-parser", "gemma4",
                                  "--tool-call-parser", "gemma4",
                                  "--enable-auto-tool-choice"], "gemma-4-31b-it")
    ctx = build_context(server, report)
    assert ctx["model"]["is_gemma4"] and ctx["model"]["family"] == "gemma4-31b"
    assert ctx["memory"]["known"] and ctx["memory"]["kv_capacity_tokens"] > 0
    assert ctx["flags"]["max_model_len"] == 262144
    from audit.kb.engine import load_rules
    fired = {f.rule_id for f in load_rules().evaluate(ctx)}
    assert "up-reasoning-parser-model-mismatch" not in fired
    assert "up-tool-parser-model-mismatch" not in fired


def test_any_family_gets_a_memory_budget_from_the_agents_data_alone():
    for name in ("qwen3-30b-a3b", "deepseek-v3", "gpt-oss-20b", "qwen3.5-35b-a3b", "glm-4.5"):
        report, server = _report_for(["vllm", "serve", "/m", "-tp", "8"], name, count=8)
        ctx = build_context(server, report)
        assert ctx["model"]["arch"]["known"], name
        assert ctx["memory"]["kv_bytes_per_token"] > 0, name
        assert ctx["model"]["family_decided"], name


@pytest.mark.parametrize("config", [
    {"num_hidden_layers": 10**15, "num_attention_heads": 8, "hidden_size": 64},
    {"num_hidden_layers": "60", "text_config": [1, 2], "architectures": "Gemma4"},
    {"num_hidden_layers": 4, "layer_types": ["x"] * 10, "rope_scaling": {"type": "yarn",
                                                                         "factor": "big"}},
    {"num_hidden_layers": 2, "num_attention_heads": 0, "kv_lora_rank": -1,
     "quantization_config": "fp8", "hybrid_override_pattern": "M*" * 5000},
    {"model_type": "qwen3_next", "num_hidden_layers": 48, "full_attention_interval": 4,
     "linear_num_value_heads": 1e300, "linear_key_head_dim": 1e300,
     "linear_value_head_dim": 1, "linear_num_key_heads": 1, "num_attention_heads": 2},
])
def test_hostile_configs_never_raise_and_stay_bounded(config):
    report, server = _report_for(["vllm", "serve", "/m"], None)
    server["model_files"] = {"config": config, "weights_bytes": 10**30}
    ctx = build_context(server, report)  # must not raise or hang
    assert ctx["model"]["arch"]["layers"] is None or ctx["model"]["arch"]["layers"] > 0
    assert isinstance(ctx["memory"]["notes"], list)


def test_expert_parallel_over_data_parallel_ranks_shards_only_the_experts():
    # recipes#12: Qwen3-Coder-480B-FP8 served with -dp 8 --enable-expert-parallel on H20s;
    # here the same layout with the real Qwen3-235B-A22B config (the 480B's is not in the
    # fixtures): every rank holds all attention/dense weights and 1/8 of the experts.
    geom = _geom("qwen3-235b-a22b")
    assert geom["expert_params_b"] == pytest.approx(226, rel=0.03)
    alone = _budget("qwen3-235b-a22b", quant="fp8")
    spread = _budget("qwen3-235b-a22b", quant="fp8", ep_shards=8)
    assert alone["fits_weights"] is False and spread["fits_weights"] is True
    assert spread["weights_gib"] == pytest.approx(
        (235.09 - 226) * 1e9 / 2**30 + 226 * 1e9 / 8 / 2**30, rel=0.03)
    assert "experts over 8 DP ranks" in spread["weights_source"]
