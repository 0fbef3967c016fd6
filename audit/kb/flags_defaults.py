"""Hand tables kept from before the release tables (audit/kb/data/vllm, read by
:mod:`audit.kb.flags`): ``KNOWN_FLAGS`` renders recommended command lines
(audit/recommend/plan.py), ``REMOVED_FLAGS`` gives sourced replacement advice for removed
flags, ``SECRET_FLAGS`` names secret-valued options. Which flags a release accepts, their
spellings and defaults come from the release tables, never from here.

Types: ``int``, ``float``, ``str``, ``tokens`` (int accepting ``1k``=1000 / ``1K``=1024 /
``m``/``g`` suffixes), ``bool`` (``--x`` / ``--no-x`` / ``--x=false``), ``flag`` (plain
store_true: no ``--no-`` form), ``json`` (JSON object, also the dotted ``--x.key v`` form),
``list`` (nargs='+'). Source: vllm-facts §4.1-4.2 ([V] ``arg_utils.py``, ``cli_args.py``,
``argparse_utils.py``).
"""

from __future__ import annotations

KNOWN_FLAGS: dict[str, str] = {
    # model / loading
    "model": "str", "served_model_name": "list", "tokenizer": "str", "revision": "str",
    "tokenizer_revision": "str", "code_revision": "str", "trust_remote_code": "bool",
    "dtype": "str", "quantization": "str", "load_format": "str", "download_dir": "str",
    "max_model_len": "tokens", "hf_overrides": "json", "hf_token": "str",
    "generation_config": "str", "override_generation_config": "json", "seed": "int",
    "tokenizer_mode": "str", "task": "str", "runner": "str", "convert": "str",
    "safetensors_load_strategy": "str", "config_format": "str", "hf_config_path": "str",
    "model_loader_extra_config": "json", "pooler_config": "json", "rope_scaling": "json",
    "language_model_only": "bool", "limit_mm_per_prompt": "json",
    "mm_processor_kwargs": "json", "skip_tokenizer_init": "bool",
    "disable_sliding_window": "bool", "max_logprobs": "int", "logprobs_mode": "str",
    # parallelism
    "tensor_parallel_size": "int", "pipeline_parallel_size": "int",
    "data_parallel_size": "int", "data_parallel_size_local": "int",
    "data_parallel_rank": "int", "data_parallel_address": "str",
    "data_parallel_rpc_port": "int", "data_parallel_backend": "str",
    "enable_expert_parallel": "bool", "enable_eplb": "bool",
    "decode_context_parallel_size": "int", "prefill_context_parallel_size": "int",
    "distributed_executor_backend": "str", "disable_custom_all_reduce": "bool",
    "api_server_count": "int", "headless": "flag", "nnodes": "int", "node_rank": "int",
    # memory / cache / scheduler
    "gpu_memory_utilization": "float", "kv_cache_memory_bytes": "tokens",
    "kv_cache_dtype": "str", "block_size": "int", "enable_prefix_caching": "bool",
    "prefix_caching_hash_algo": "str", "num_gpu_blocks_override": "int",
    "cpu_offload_gb": "float", "swap_space": "float", "calculate_kv_scales": "bool",
    "max_num_seqs": "int", "max_num_batched_tokens": "tokens",
    "enable_chunked_prefill": "bool", "max_num_partial_prefills": "int",
    "scheduling_policy": "str", "async_scheduling": "bool", "performance_mode": "str",
    "scheduler_reserve_full_isl": "bool", "long_prefill_token_threshold": "tokens",
    "mamba_cache_dtype": "str", "kv_offloading_size": "float", "kv_offloading_backend": "str",
    "kv_transfer_config": "json", "kv_events_config": "json",
    # execution / compilation / attention
    "enforce_eager": "bool", "compilation_config": "json", "optimization_level": "int",
    "attention_backend": "str", "attention_config": "json", "cuda_graph_sizes": "list",
    "max_cudagraph_capture_size": "int", "max_seq_len_to_capture": "int",
    "linear_backend": "str", "moe_backend": "str", "enable_sleep_mode": "bool",
    "additional_config": "json", "structured_outputs_config": "json",
    "speculative_config": "json", "numa_bind": "bool", "enable_dbo": "bool",
    # LoRA
    "enable_lora": "bool", "max_lora_rank": "int", "max_loras": "int",
    "max_cpu_loras": "int", "fully_sharded_loras": "bool", "lora_modules": "list",
    "lora_dtype": "str",
    # frontend
    "host": "str", "port": "int", "uds": "str", "api_key": "list",
    "chat_template": "str", "chat_template_content_format": "str",
    "trust_request_chat_template": "bool", "default_chat_template_kwargs": "json",
    "response_role": "str", "reasoning_parser": "str", "reasoning_parser_plugin": "str",
    "tool_call_parser": "str", "tool_parser_plugin": "str",
    "enable_auto_tool_choice": "bool", "tool_server": "str",
    "enable_prompt_tokens_details": "bool", "enable_force_include_usage": "bool",
    "enable_request_id_headers": "bool", "root_path": "str", "middleware": "list",
    "allowed_origins": "list", "allowed_methods": "list", "allowed_headers": "list",
    "allow_credentials": "bool", "ssl_keyfile": "str", "ssl_certfile": "str",
    "ssl_ca_certs": "str", "uvicorn_log_level": "str", "disable_uvicorn_access_log": "bool",
    "disable_frontend_multiprocessing": "bool", "return_tokens_as_token_ids": "bool",
    "max_log_len": "int", "enable_tokenizer_info_endpoint": "bool",
    "enable_server_load_tracking": "bool", "enable_log_requests": "bool",
    "enable_log_outputs": "bool", "disable_log_requests": "flag",
    # observability
    "disable_log_stats": "flag", "show_hidden_metrics_for_version": "str",
    "kv_cache_metrics": "bool", "enable_mfu_metrics": "bool",
    "otlp_traces_endpoint": "str", "collect_detailed_traces": "list",
    # removed / legacy (still parsed so argv reads correctly)
    "enable_reasoning": "flag", "use_v2_block_manager": "flag",
    "num_scheduler_steps": "int", "guided_decoding_backend": "str",
    # launcher-level
    "config": "str",
}

SHORT_ALIASES: dict[str, str] = {
    "tp": "tensor_parallel_size", "pp": "pipeline_parallel_size", "dp": "data_parallel_size",
    "q": "quantization", "sc": "speculative_config", "cc": "compilation_config",
    "ac": "attention_config", "asc": "api_server_count", "ep": "enable_expert_parallel",
    "dcp": "decode_context_parallel_size", "pcp": "prefill_context_parallel_size",
    "dpl": "data_parallel_size_local", "O": "optimization_level",
}

# Flags whose value is a secret: never echoed into evidence verbatim.
SECRET_FLAGS = frozenset({"api_key", "hf_token"})

# Flags removed from vLLM: (flag, removed in, replacement, source). Only rows with a source.
REMOVED_FLAGS: tuple[tuple[str, str, str, str], ...] = (
    ("enable_reasoning", "0.10.0", "--reasoning-parser alone",
     "deprecated by https://github.com/vllm-project/vllm/pull/17452 (v0.9.0, "
     "https://github.com/vllm-project/vllm/pull/18404); 'unrecognized arguments' on 0.10.0 "
     "in https://github.com/vllm-project/vllm/issues/18538"),
    ("disable_log_requests", "0.11.0", "--enable-log-requests (logging is off by default)",
     "https://github.com/vllm-project/vllm/pull/21739; removed for 0.11+ per "
     "https://github.com/opendatahub-io/kserve/pull/1005"),
    ("swap_space", "0.18.0", "nothing (V1 never allocates CPU swap)",
     "https://github.com/vllm-project/vllm/pull/36216 (2026-03-06); absent from EngineArgs "
     "0.18.0-0.29.0 per https://github.com/unslothai/unsloth-zoo/issues/1210"),
)
