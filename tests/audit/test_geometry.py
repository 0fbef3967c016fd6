"""audit.kb.geometry: family/quantization detection and KV sizing against seed 000."""

from __future__ import annotations

import pytest

from audit.kb.geometry import (
    detect_quantization,
    find_model,
    geometry_context,
    kv_bytes_per_token,
)

H100_GIB = 85520809984 / 2**30
EAGLE3 = "RedHatAI/gemma-4-31B-it-speculator.eagle3"


@pytest.mark.parametrize(("model", "family"), [
    ("google/gemma-4-31B-it", "gemma4-31b"),
    ("cyankiwi/gemma-4-31B-it-AWQ-4bit", "gemma4-31b"),
    ("nvidia/Gemma-4-31B-IT-NVFP4", "gemma4-31b"),
    ("google/gemma-4-26b-A4B-it", "gemma4-26b-a4b"),
    ("RedHatAI/gemma-4-26B-A4B-it-FP8-Dynamic", "gemma4-26b-a4b"),
    ("google/gemma-4-12B-it-qat-w4a16-ct", "gemma4-12b"),
    ("google/gemma-4-E4B-it", "gemma4-e4b"),
    ("google/gemma-4-E2B-it", "gemma4-e2b"),
    ("google/gemma-4-31B-it-assistant", "gemma4-assistant"),
    ("/models/gemma-3-27b-it", "gemma3"),
    ("Qwen/Qwen3-Coder-30B-A3B-Instruct", "qwen3"),
    ("meta-llama/Llama-3.2-11B-Vision-Instruct", "mllama"),
    ("/models/Meta-Llama-3.1-8B-Instruct", "llama"),
    ("/models/DeepSeek-R1", "deepseek"),
    ("zai-org/GLM-4.7-FP8", "glm"),
])
def test_model_ids_map_to_their_family(model: str, family: str) -> None:
    assert find_model(model)["family"] == family


def test_an_unrelated_model_is_not_in_the_table() -> None:
    assert find_model("facebook/opt-125m") is None


@pytest.mark.parametrize(("flag", "dtype", "model", "quant"), [
    (None, None, "cyankiwi/gemma-4-31B-it-AWQ-4bit", "awq"),
    (None, None, "cyankiwi/gemma-4-31B-it-qat-AWQ-INT4", "qat-w4a16"),
    (None, None, "google/gemma-4-31B-it-qat-w4a16-ct", "qat-w4a16"),
    ("modelopt", None, "nvidia/Gemma-4-31B-IT-NVFP4", "nvfp4"),
    ("modelopt", None, "nvidia/some-fp-model", "fp8"),
    ("compressed-tensors", None, "RedHatAI/gemma-4-26B-A4B-it-FP8-Dynamic", "fp8"),
    ("awq_marlin", None, "/models/gemma-4-31B-awq", "awq"),
    (None, None, "Qwen2.5-72B-Instruct-GPTQ-Int4", "gptq"),
    ("fp8", None, "google/gemma-4-26B-A4B-it", "fp8"),
    (None, "float16", "/models/x", "fp16"),
    (None, None, "/models/x.gguf", "gguf"),
    (None, None, "/model", None),
])
def test_quantization_comes_from_flags_then_the_model_id(flag, dtype, model, quant) -> None:
    assert detect_quantization(flag, dtype, model)[0] == quant


def test_gemma4_31b_kv_bytes_match_vllm_facts_table() -> None:
    row = find_model("google/gemma-4-31B-it")
    assert kv_bytes_per_token(row, 1, 1, 2) == (81920, 819200)  # 80 KiB global, 800 KiB sliding
    assert kv_bytes_per_token(row, 1, 1, 1) == (40960, 409600)
    # TP 8: global KV heads (4) stop shrinking past TP 4 (replicated per rank)
    assert kv_bytes_per_token(row, 8, 1, 2)[0] == kv_bytes_per_token(row, 4, 1, 2)[0]


def test_gemma4_26b_kv_bytes_match_vllm_facts_table() -> None:
    row = find_model("google/gemma-4-26B-A4B-it")
    assert kv_bytes_per_token(row, 1, 1, 2) == (20480, 204800)


def _seed(tp: int, util: float, batched: int, max_len: int) -> dict:
    row = find_model("cyankiwi/gemma-4-31B-it-AWQ-4bit")
    return geometry_context(row, quant="awq", tp=tp, pp=1, kv_cache_dtype="fp8",
                            max_model_len=max_len, max_num_batched_tokens=batched,
                            block_size=16, memory_gib=H100_GIB, util=util, spec_model=EAGLE3)


def test_light_recipe_kv_estimate_is_within_15_percent_of_the_seeds_85k() -> None:
    geo = _seed(1, 0.85, 8192, 32768)
    assert abs(geo["kv_capacity_tokens_estimate"] - 85_000) / 85_000 < 0.15
    assert geo["single_request_max_tokens_estimate"] > 32768


def test_tp1_at_094_per_card_kv_is_within_15_percent_of_the_seeds_102k() -> None:
    geo = _seed(1, 0.94, 8192, 32768)
    assert abs(geo["kv_capacity_tokens_estimate"] - 102_000) / 102_000 < 0.15


def test_push_recipe_holds_a_full_262144_token_request() -> None:
    geo = _seed(2, 0.94, 16384, 262144)
    assert geo["single_request_max_tokens_estimate"] >= 262144
    assert abs(geo["kv_capacity_tokens_estimate"] - 244_000) / 244_000 < 0.15
    assert abs(geo["max_concurrency_estimate"] - 6.11) / 6.11 < 0.15


def test_a_bf16_31b_on_one_80gb_card_leaves_no_room_for_a_long_request() -> None:
    row = find_model("google/gemma-4-31B-it")
    geo = geometry_context(row, quant="bf16", tp=1, pp=1, kv_cache_dtype="auto",
                           max_model_len=262144, max_num_batched_tokens=8192, block_size=16,
                           memory_gib=H100_GIB, util=0.92)
    assert geo["single_request_max_tokens_estimate"] < 262144
    assert geo["max_concurrency_estimate"] < 1


def test_sliding_layers_are_capped_not_scaled_with_context() -> None:
    short = _seed(2, 0.94, 16384, 65536)["max_concurrency_estimate"]
    long = _seed(2, 0.94, 16384, 262144)["max_concurrency_estimate"]
    # the global part grows 4x, the sliding reservation stays: less than 4x fewer requests
    assert short / long < 4


def test_a_model_without_sourced_geometry_says_it_cannot_check() -> None:
    geo = geometry_context(find_model("google/gemma-4-12B-it"), quant="bf16", tp=1, pp=1,
                           kv_cache_dtype="auto", max_model_len=None,
                           max_num_batched_tokens=2048, block_size=16, memory_gib=46, util=0.9)
    assert geo["known"] is False
    assert geo["single_request_max_tokens_estimate"] is None
    assert any("cannot be checked" in n for n in geo["notes"])


def test_an_unknown_model_gives_every_key() -> None:
    geo = geometry_context(None, quant=None, tp=1, pp=1, kv_cache_dtype=None, max_model_len=None,
                           max_num_batched_tokens=None, block_size=None, memory_gib=None,
                           util=None)
    assert geo["known"] is False and geo["layers"] is None and "weight_gib" in geo


def test_case_006_qwen3_coder_kv_for_one_full_request_matches_the_engine_log() -> None:
    row = find_model("Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8")
    global_bytes, _ = kv_bytes_per_token(row, 1, 1, 2)
    assert global_bytes * 262144 / 2**30 == pytest.approx(24.0)  # "24.0 GiB KV cache needed"
