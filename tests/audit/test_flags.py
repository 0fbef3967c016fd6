"""audit.kb.flags: raw argv -> effective engine config, with vLLM's defaults and sources."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from audit.kb.effective import batch_defaults, effective_flags
from audit.kb.flags import parse_argv, parse_tokens
from audit.kb.versions import version_tuple

H100 = (79.65, "NVIDIA H100 80GB HBM3")


def effective(argv: list[str], version: str | None = "0.25.1",
              gpu: tuple[float | None, str | None] = H100) -> tuple[dict, dict]:
    return effective_flags(parse_argv(argv), version, gpu[0], gpu[1])


@pytest.mark.parametrize(("argv", "launcher"), [
    (["vllm", "serve", "google/gemma-4-31B-it"], "vllm serve"),
    (["/usr/bin/python3", "/venv/bin/vllm", "serve", "google/gemma-4-31B-it"], "vllm serve"),
    (["python3", "-m", "vllm.entrypoints.cli.main", "serve", "google/gemma-4-31B-it"],
     "cli module"),
    (["env", "CUDA_VISIBLE_DEVICES=0", "vllm", "serve", "google/gemma-4-31B-it"], "vllm serve"),
])
def test_it_finds_the_model_for_every_serve_launcher(argv: list[str], launcher: str) -> None:
    parsed = parse_argv(argv)
    assert parsed.launcher == launcher
    assert parsed.values["model"] == "google/gemma-4-31B-it"
    assert parsed.is_server


def test_it_reads_the_api_server_module_form_and_ignores_its_positional() -> None:
    parsed = parse_argv(["python", "-u", "-m", "vllm.entrypoints.openai.api_server",
                         "stray", "--model", "m/x"])
    assert parsed.launcher == "api_server module"
    assert parsed.values["model"] == "m/x"
    assert any("ignored" in e for e in parsed.errors)


def test_model_flag_wins_over_a_serve_positional() -> None:
    parsed = parse_argv(["vllm", "serve", "--model", "a/b", "--port", "8001"])
    assert parsed.values["model"] == "a/b" and parsed.values["port"] == 8001


def test_it_unwraps_docker_run_with_combined_short_options_and_volumes() -> None:
    parsed = parse_argv(["docker", "run", "-itd", "--name", "g", "--ipc=host", "--gpus",
                         '"device=0"', "-v", "/models/gemma-4-31B-it-AWQ-4bit:/model",
                         "-e", "A=1", "vllm/vllm-openai:v0.25.1", "--model", "/model", "-tp", "2"])
    assert parsed.launcher == "docker run"
    assert parsed.container_image == "vllm/vllm-openai:v0.25.1"
    assert parsed.mounts == {"/model": "/models/gemma-4-31B-it-AWQ-4bit"}
    assert parsed.values["tensor_parallel_size"] == 2


def test_it_reads_container_args_that_start_with_the_image() -> None:
    parsed = parse_argv(["vllm/vllm-openai:v0.10.0", "--model", "Qwen/Qwen3-4B"])
    assert parsed.launcher == "container args"
    assert parsed.container_image == "vllm/vllm-openai:v0.10.0"


def test_vllm_bench_is_not_a_server_but_its_flags_are_read() -> None:
    parsed = parse_argv(["vllm", "bench", "latency", "--model", "g/x", "--kv-cache-dtype", "fp8"])
    assert parsed.is_server is False
    assert parsed.values["kv_cache_dtype"] == "fp8"


def test_dash_underscore_equals_and_mixed_spellings_are_one_flag() -> None:
    parsed = parse_argv(["vllm", "serve", "m", "--tensor-parallel_size", "2",
                         "--max_model_len=8k", "--gpu_memory_utilization", "0.9"])
    assert parsed.values["tensor_parallel_size"] == 2
    assert parsed.values["max_model_len"] == 8000
    assert parsed.values["gpu_memory_utilization"] == 0.9


def test_k_suffixes_follow_vllm_decimal_and_binary_rules() -> None:
    assert parse_tokens("1k") == 1000 and parse_tokens("1K") == 1024
    assert parse_tokens("2m") == 2_000_000 and parse_tokens("32768") == 32768
    assert parse_tokens("abc") is None


def test_booleans_accept_no_prefix_and_inline_values_but_never_swallow_a_word() -> None:
    parsed = parse_argv(["vllm", "serve", "m", "--no-enable-prefix-caching",
                         "--enable-chunked-prefill=False", "--enforce-eager",
                         "--trust-remote-code", "false", "--no-async-scheduling"])
    values = parsed.values
    assert values["enable_prefix_caching"] is False
    assert values["enable_chunked_prefill"] is False
    assert values["enforce_eager"] is True
    # BooleanOptionalAction takes no value: vLLM rejects the stray "false".
    assert values["trust_remote_code"] is True and parsed.unknown == ["false"]
    assert values["async_scheduling"] is False


@pytest.mark.parametrize(("alias", "key", "raw", "value"), [
    ("-tp", "tensor_parallel_size", "4", 4), ("-pp", "pipeline_parallel_size", "2", 2),
    ("-dp", "data_parallel_size", "8", 8), ("-q", "quantization", "fp8", "fp8"),
    ("-asc", "api_server_count", "2", 2),
])
def test_short_aliases_map_to_their_long_flags(alias: str, key: str, raw: str, value) -> None:
    assert parse_argv(["vllm", "serve", "m", alias, raw]).values[key] == value
    assert parse_argv(["vllm", "serve", "m", f"{alias}={raw}"]).values[key] == value


def test_short_json_and_boolean_aliases_and_optimisation_level() -> None:
    parsed = parse_argv(["vllm", "serve", "m", "-sc", '{"method":"ngram"}', "-cc",
                         '{"cudagraph_mode":"FULL"}', "-ep", "-O3"])
    assert parsed.values["speculative_config"] == {"method": "ngram"}
    assert parsed.values["compilation_config"] == {"cudagraph_mode": "FULL"}
    assert parsed.values["enable_expert_parallel"] is True
    assert parsed.values["optimization_level"] == "3"  # a str option since 0.20 (table)


def test_json_flags_and_their_dotted_forms_build_the_same_dict() -> None:
    dotted = parse_argv(["vllm", "serve", "m", "--speculative-config.method", "mtp",
                         "--speculative-config.num_speculative_tokens", "4",
                         "--speculative_config.parallel_drafting=true"]).values
    assert dotted["speculative_config"] == {"method": "mtp", "num_speculative_tokens": 4,
                                            "parallel_drafting": True}
    whole = parse_argv(["vllm", "serve", "m", "--limit-mm-per-prompt",
                        '{"image": 0, "audio": 0}', "--default-chat-template-kwargs",
                        json.dumps({"enable_thinking": True}), "--hf-overrides",
                        '{"max_position_embeddings": 1000}', "--mm-processor-kwargs",
                        '{"max_soft_tokens": 280}']).values
    assert whole["limit_mm_per_prompt"] == {"image": 0, "audio": 0}
    assert whole["default_chat_template_kwargs"] == {"enable_thinking": True}
    assert whole["hf_overrides"]["max_position_embeddings"] == 1000
    assert whole["mm_processor_kwargs"]["max_soft_tokens"] == 280


def test_legacy_key_value_multimodal_limits_are_read() -> None:
    values = parse_argv(["vllm", "serve", "m", "--limit-mm-per-prompt", "image=1,video=0"]).values
    assert values["limit_mm_per_prompt"] == {"image": 1, "video": 0}


def test_broken_json_is_kept_raw_and_reported_not_raised() -> None:
    parsed = parse_argv(["vllm", "serve", "m", "--compilation-config", '{"a": [1, 2], ...'])
    assert parsed.values["compilation_config"] == {"_raw": '{"a": [1, 2], ...'}
    assert any("compilation_config" in e for e in parsed.errors)


def test_last_duplicate_wins_and_is_recorded() -> None:
    parsed = parse_argv(["vllm", "serve", "m", "--max-num-seqs", "64", "--max-num-seqs", "128"])
    assert parsed.values["max_num_seqs"] == 128
    assert parsed.duplicates == ["max_num_seqs"]


def test_redacted_secrets_and_placeholders_are_kept_as_such() -> None:
    parsed = parse_argv(["vllm", "serve", "<model path not stated>", "--api-key", "REDACTED",
                         "--speculative-config", "<truncated>"])
    assert parsed.values["api_key"] == ["REDACTED"]
    assert parsed.values["model"] is None and parsed.values["speculative_config"] is None
    assert set(parsed.placeholders) == {"model", "speculative_config"}


def test_unknown_flags_are_kept_verbatim_and_never_swallow_the_next_token() -> None:
    parsed = parse_argv(["vllm", "serve", "--frobnicate", "m", "--shiny-new-bool",
                         "--port", "9000"])
    assert parsed.values["model"] == "m"
    assert parsed.unknown == ["--frobnicate", "--shiny-new-bool"]
    assert parsed.values["port"] == 9000


def test_a_config_file_is_noted_as_unreadable_here() -> None:
    flags, meta = effective(["vllm", "serve", "m", "--config", "cfg.yaml"])
    assert meta["config_file"] == "cfg.yaml"
    assert any("cannot be read" in e for e in meta["errors"])


def test_unset_flags_get_defaults_with_their_source() -> None:
    flags, meta = effective(["vllm", "serve", "google/gemma-4-31B-it", "--max-num-seqs", "64"])
    assert flags["tensor_parallel_size"] == 1 and flags["kv_cache_dtype"] == "auto"
    assert flags["gpu_memory_utilization"] == 0.92
    assert meta["sources"]["max_num_seqs"] == "argv"
    assert meta["sources"]["gpu_memory_utilization"].startswith("default")
    assert flags["max_num_batched_tokens"] == 8192
    assert "max_num_seqs" in meta["set"] and "kv_cache_dtype" not in meta["set"]


def test_gpu_memory_utilization_default_follows_the_release_table() -> None:
    assert effective(["vllm", "serve", "m"], "0.19.1")[0]["gpu_memory_utilization"] == 0.9
    assert effective(["vllm", "serve", "m"], "0.20.0")[0]["gpu_memory_utilization"] == 0.92
    assert effective(["vllm", "serve", "m"], "0.20.2")[0]["gpu_memory_utilization"] == 0.92


@pytest.mark.parametrize(("version", "gpu", "seqs", "tokens"), [
    ("0.25.1", (79.65, "NVIDIA H100 80GB HBM3"), 1024, 8192),
    ("0.25.1", (79.15, "NVIDIA A100-SXM4-80GB"), 256, 2048),
    ("0.25.1", (23.5, "NVIDIA GeForce RTX 4090"), 256, 2048),
    ("0.25.1", (None, None), 256, 2048),
    ("0.8.2", (23.5, "NVIDIA GeForce RTX 4090"), 1024, 2048),
    ("0.8.1", (79.65, "NVIDIA H100 80GB HBM3"), 1024, 8192),
    ("0.6.3", (79.15, "NVIDIA A100 80GB"), 256, None),
])
def test_batch_defaults_follow_the_rule_of_the_running_version(version, gpu, seqs, tokens):
    got_seqs, got_tokens, rule = batch_defaults(version_tuple(version), *gpu)
    assert (got_seqs, got_tokens) == (seqs, tokens)
    assert rule


def test_throughput_mode_doubles_defaulted_batch_limits_only() -> None:
    flags, meta = effective(["vllm", "serve", "m", "--performance-mode", "throughput",
                             "--max-num-seqs", "32"], "0.25.1", (31.4, "NVIDIA GeForce RTX 5090"))
    assert flags["max_num_seqs"] == 32
    assert flags["max_num_batched_tokens"] == 4096
    assert "doubled" in meta["sources"]["max_num_batched_tokens"]


def test_removed_flags_are_listed_only_past_their_removal() -> None:
    argv = ["vllm", "serve", "m", "--disable-log-requests", "--enable-reasoning"]
    assert effective(argv, "0.9.2")[1]["removed"] == []
    for version in ("0.11.0", "0.15.1", "0.33.0"):  # --disable-log-requests exists there
        removed = {r["flag"]: r["removed_in"] for r in effective(argv, version)[1]["removed"]}
        assert removed == {"--enable-reasoning": "0.10.0"}
    assert effective(argv, None)[1]["removed"] == []


def test_swap_space_defaults_to_4_gib_until_its_removal() -> None:
    assert effective(["vllm", "serve", "m"], "0.17.1")[0]["swap_space"] == 4.0
    flags, meta = effective(["vllm", "serve", "m", "--swap-space", "8"], "0.25.1")
    assert flags["swap_space"] == 8.0
    assert [r["flag"] for r in meta["removed"]] == ["--swap-space"]
    assert effective(["vllm", "serve", "m"], "0.25.1")[0]["swap_space"] is None


def test_served_model_name_list_keeps_the_first_name_for_rules() -> None:
    flags, _ = effective(["vllm", "serve", "m", "--served-model-name", "a", "b", "--port", "1"])
    assert flags["served_model_name"] == "a"
    assert flags["served_model_name_all"] == ["a", "b"]
    plain, meta = effective(["vllm", "serve", "g/m"])
    assert plain["served_model_name"] == "g/m"
    assert meta["sources"]["served_model_name"] == "default (= model)"


TOKENS = ["vllm", "serve", "docker", "run", "-v", "a:b", "python3", "-m",
          "vllm.entrypoints.openai.api_server", "--model", "m/x", "-tp", "2", "--tp", "-O3",
          "--speculative-config", "{", '{"method": "mtp"}', "--speculative-config.model",
          "--x.y+", "a,b", "--no-enforce-eager", "--enforce-eager=maybe", "<unknown>",
          "--max-model-len", "1K", "-1", "auto", "REDACTED", "--", "-", "=", "--=", "--no-",
          "--served-model-name", "--config", "cfg.yaml", "img/name:tag", "--port=x"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(TOKENS) | st.text(max_size=6), max_size=14),
       st.sampled_from([None, "0.6.3", "0.8.2", "0.25.1", "junk"]))
def test_parsing_and_defaults_never_raise_on_any_argv(argv: list[str], version) -> None:
    parsed = parse_argv(argv)
    flags, meta = effective_flags(parsed, version if version != "junk" else None, None, None)
    assert isinstance(flags["max_num_seqs"], int)
    assert set(meta["set"]) <= set(flags)


def test_an_unset_max_model_len_follows_the_release_rule_for_the_model_config() -> None:
    from audit.kb.effective import derive_max_model_len
    gemma = {"architectures": ["Gemma4ForConditionalGeneration"],
             "text_config": {"max_position_embeddings": 262144, "sliding_window": 1024}}
    assert derive_max_model_len("0.33.0", gemma)[0] == 262144
    both = {"max_position_embeddings": 32768, "seq_length": 8192}
    value, source = derive_max_model_len("0.25.1", both)
    assert value == 8192 and "seq_length" in source  # vLLM takes the smallest key
    assert derive_max_model_len("0.25.1", {"hidden_size": 4096})[0] == 2048
    assert derive_max_model_len("0.25.1", None)[0] is None
