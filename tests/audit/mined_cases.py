"""Expectations for the real-report cases mined from the vLLM tracker
(tests/audit/more_cases/2NN-*.json and, for the second mining pass, 3NN-*.json; rules with the
``upx-`` prefix).

``EXPECTATIONS``: case prefix -> (rule ids that must fire, minimum severity), read by
tests/audit/test_more_cases.py next to its own table. ``NEAR_MISSES``: case prefix -> list of
(what changed, mutation) where the mutation turns the real report into its nearest silent
neighbour (the fixed release, a GPU with the capability, the other backend...). Mutation keys:
``vllm_version`` (replaces the case string), ``gpus`` (replaces the list), ``env`` (replaces
the mapping), ``nvidia_driver_version`` (the host driver), ``argv_replace`` ({token: new
token, or None to drop it}), ``argv_set`` ({flag: the value after it}), ``argv_add`` (tokens
appended). Every near miss must leave the case's expected ``upx-`` rules silent.
"""

from __future__ import annotations

from typing import Any

H100 = [{"name": "NVIDIA H100 80GB HBM3", "memory_gib": 80, "count": 1}]
H200x8 = [{"name": "NVIDIA H200", "memory_gib": 141, "count": 8}]

EXPECTATIONS: dict[str, tuple[tuple[str, ...], str]] = {}
NEAR_MISSES: dict[str, list[tuple[str, dict[str, Any]]]] = {}


def expect(prefix: str, rules: tuple[str, ...], minimum: str,
           *near: tuple[str, dict[str, Any]]) -> None:
    """Register one case: the rules it must fire and its silent near misses."""
    EXPECTATIONS[prefix] = (rules, minimum)
    NEAR_MISSES[prefix] = list(near)


# --------------------------------------------------------------------------- batch 1
expect("201", ("upx-gemma4-moe-int4-packed-experts-keyerror",), "high",
       ("fixed release", {"vllm_version": "0.21.0"}),
       ("BF16 checkpoint", {"argv_replace": {"cyankiwi/gemma-4-26B-A4B-it-AWQ-4bit":
                                             "google/gemma-4-26B-A4B-it"}}))
expect("202", ("upx-gemma4-moe-autoround-loading",), "high",
       ("AWQ checkpoint", {"argv_replace": {"Intel/gemma-4-26B-A4B-it-int4-AutoRound":
                                            "cyankiwi/gemma-4-26B-A4B-it-AWQ-4bit"}}))
expect("203", ("upx-dsa-sparse-mla-unsupported-gpu",), "high",
       ("Hopper", {"gpus": [{"name": "NVIDIA H200", "memory_gib": 141, "count": 2}]}),
       ("dense MLA model", {"argv_replace": {"deepseek-ai/DeepSeek-V4-Flash":
                                             "deepseek-ai/DeepSeek-V3.1"}}))
expect("204", ("upx-dsa-blackwell-cutlass-mla-forced",), "high",
       ("fixed release", {"vllm_version": "0.13.0"}),
       ("Hopper", {"gpus": H200x8}))
expect("205", ("upx-gptoss-preview-build-pre-hopper",), "high",
       ("Hopper", {"gpus": H100}),
       ("release image", {"vllm_version": "0.10.1",
                          "argv_replace": {"vllm/vllm-openai:gptoss": "vllm/vllm-openai:v0.10.1"}}))


# --------------------------------------------------------------------------- batch 2
expect("206", ("upx-glm4-moe-needs-vllm-0-10",), "high",
       ("supported release", {"vllm_version": "0.10.1"}))
expect("207", ("upx-qwen3-next-needs-vllm-0-11",), "high",
       ("supported release", {"vllm_version": "0.11.0"}))
expect("208", ("upx-image-cuda-newer-than-driver",), "high",
       ("driver new enough", {"nvidia_driver_version": "550.54.15"}),
       ("image before CUDA 12.4", {"vllm_version": "0.4.2",
                                   "argv_replace": {"vllm/vllm-openai:v0.5.0":
                                                    "vllm/vllm-openai:v0.4.2"}}))
expect("209", ("upx-mla-sm12x-no-attention-backend",), "high",
       ("last good release", {"vllm_version": "0.13.0"}),
       ("SM100", {"gpus": [{"name": "NVIDIA B200", "memory_gib": 180, "count": 8}]}))
expect("210", ("upx-geforce-tp-nccl-p2p",), "medium",
       ("P2P disabled", {"env": {"CUDA_VISIBLE_DEVICES": "0,1,2,3", "NCCL_P2P_DISABLE": "1"}}),
       ("single GPU", {"argv_replace": {"4": "1"}}))


# --------------------------------------------------------------------------- batch 3
expect("211", ("upx-gemma3-vllm-0-9-2-transformers-4-53-2",), "high",
       ("last good release", {"vllm_version": "0.9.1"}),
       ("non-Gemma model", {"argv_replace": {"google/medgemma-27b-it":
                                             "Qwen/Qwen2.5-32B-Instruct"}}))
expect("212", ("upx-glm45-parser-name-before-0-10-1-1",), "high",
       ("fixed release", {"vllm_version": "0.10.1.1"}),
       ("glm4_moe names", {"argv_replace": {"glm45": "glm4_moe"}}))
expect("213", ("upx-glm5-dsa-decode-context-parallel",), "critical",
       ("last good release", {"vllm_version": "0.27.0"}),
       ("no DCP", {"argv_set": {"--decode-context-parallel-size": "1"}}))
expect("214", ("upx-nemotron-h-nvfp4-moe-sm12x",), "high",
       ("SM100", {"gpus": [{"name": "NVIDIA B200", "memory_gib": 180, "count": 1}]}),
       ("FP8 checkpoint", {"argv_replace": {"nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4":
                                            "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-FP8"}}))


# --------------------------------------------------------------------------- batch 4
expect("215", ("upx-gemma4-mm-default-batched-tokens-below-image",), "critical",
       ("H100 default 8192", {"gpus": H100}),
       ("text only", {"argv_add": ["--limit-mm-per-prompt", '{"image": 0, "video": 0}']}),
       ("raised explicitly", {"argv_add": ["--max-num-batched-tokens", "8192"]}))
expect("216", ("upx-gemma4-dflash-pre-ada",), "high",
       ("Hopper", {"gpus": [{"name": "NVIDIA H100 80GB HBM3", "memory_gib": 80, "count": 2}]}),
       ("EAGLE3 drafter", {"argv_replace": {
           "{\"model\":\"RedHatAI/gemma-4-31B-it-speculator.dflash\"}":
           "{\"model\":\"RedHatAI/gemma-4-31B-it-speculator.eagle3\"}"}}))


# --------------------------------------------------------------------------- batch 5
expect("217", ("upx-kimi-k2-parser-before-0-10",), "high",
       ("release with the parser", {"vllm_version": "0.10.0"}))
expect("218", ("upx-minimax-m3-fp8-kv-cache",), "high",
       ("auto KV", {"argv_set": {"--kv-cache-dtype": "auto"}}))
expect("219", ("upx-ministral3-fp8-kv-garbage",), "critical",
       ("last good release", {"vllm_version": "0.24.0"}),
       ("auto KV", {"argv_set": {"--kv-cache-dtype": "auto"}}))


# --------------------------------------------------------------------------- batch 6
expect("220", ("upx-moe-lora-rank-above-128",), "high",
       ("rank 128", {"argv_set": {"--max-lora-rank": "128"}}),
       ("dense model", {"argv_replace": {"nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16":
                                         "meta-llama/Llama-3.1-8B-Instruct"}}))
expect("221", ("upx-deepep-v2-eager-trtllm-bf16",), "high",
       ("fixed release", {"vllm_version": "0.28.0"}),
       ("CUDA graphs on", {"argv_replace": {"--enforce-eager": None}}))
expect("222", ("upx-deepep-without-expert-parallel",), "medium",
       ("EP on", {"argv_add": ["--enable-expert-parallel"]}))


# --------------------------------------------------------------------------- batch 7
expect("223", ("upx-llama4-fp8-flashinfer-moe-sm100",), "high",
       ("FlashInfer MoE off", {"env": {"VLLM_USE_FLASHINFER_MOE_FP8": "0"}}),
       ("Hopper", {"gpus": [{"name": "NVIDIA H200", "memory_gib": 141, "count": 4}]}))
expect("224", ("upx-gptoss-harmony-streaming-error",), "medium",
       ("no Harmony parser", {"argv_replace": {"--reasoning-parser": None,
                                               "openai_gptoss": None}}))


# --------------------------------------------------------------------------- batch 8
expect("225", ("upx-hybrid-prefix-cache-no-hits",), "medium",
       ("attention-only model", {"argv_replace": {"Qwen/Qwen3.6-35B-A3B": "Qwen/Qwen3-30B-A3B"}}))
expect("226", ("upx-lmcache-mp-hybrid-corruption", "upx-hybrid-mtp-prefix-cache-corruption"),
       "critical",
       ("attention-only model", {"argv_replace": {"nvidia/Qwen3.6-27B-NVFP4":
                                                  "nvidia/Llama-3.3-70B-Instruct-NVFP4"}}))
expect("227", ("upx-rocm-cdna-aiter-off",), "low",
       ("AITER on", {"env": {"VLLM_ROCM_USE_AITER": "1"}}),
       ("NVIDIA GPU", {"gpus": H100}))
expect("228", ("upx-rdna4-aiter-unified-attn-lds",), "high",
       ("Triton attention", {"argv_set": {"--attention-backend": "TRITON_ATTN"}}))
expect("229", ("upx-gb10-flashinfer-fp8-kv-hd256",), "high",
       ("BF16 KV", {"argv_set": {"--kv-cache-dtype": "auto"}}),
       ("Triton attention", {"argv_add": ["--attention-backend", "TRITON_ATTN"]}))


# --------------------------------------------------------------------------- batch 9
expect("230", ("upx-qwen3-deepseek-r1-reasoning-parser",), "medium",
       ("qwen3 parser", {"argv_set": {"--reasoning-parser": "qwen3"}, "vllm_version": "0.9.0"}))
expect("231", ("upx-qwen3-reasoning-parser-before-0-9",), "high",
       ("release with the parser", {"vllm_version": "0.9.0"}))
expect("232", ("upx-hybrid-gdn-mtp-illegal-memory-access",), "high",
       ("no speculator", {"argv_replace": {"--speculative-config": None,
                                           "{\"method\":\"mtp\"}": None}}),
       ("attention-only model", {"argv_replace": {"Qwen/Qwen3.6-27B-FP8": "Qwen/Qwen3-32B-FP8"}}))


# --------------------------------------------------------------------------- batch 10
expect("233", ("upx-qwen3-moe-fp8-block-tp-shard",), "high",
       ("expert parallel", {"argv_add": ["--enable-expert-parallel"]}),
       ("TP 4", {"argv_set": {"--tensor-parallel-size": "4"}}))
expect("234", ("upx-gemma4-per-token-head-kv",), "high",
       ("per-tensor FP8 KV", {"argv_set": {"--kv_cache_dtype": "fp8"}}))
expect("235", ("upx-gemma4-lora-before-0-20",), "high",
       ("release with Gemma 4 LoRA", {"vllm_version": "0.20.0"}))


# --------------------------------------------------------------------------- batch 11
expect("236", ("upx-hybrid-default-max-num-seqs-mamba-blocks",), "high",
       ("explicit max_num_seqs", {"argv_add": ["--max-num-seqs", "128"]}),
       ("attention-only model", {"argv_replace": {"Qwen/Qwen3.8-27B": "Qwen/Qwen3-32B"}}))
expect("237", ("upx-pipeline-parallel-speculative",), "high",
       ("no PP", {"argv_set": {"--pipeline-parallel-size": "1"}}),
       ("no speculation", {"argv_replace": {"--num-speculative-tokens": None, "1": None}}))


# --------------------------------------------------------------------------- batch 12
expect("238", ("upx-sm12x-fp8-deepgemm-unknown-recipe",), "high",
       ("DeepGEMM off", {"env": {"CUDA_VISIBLE_DEVICES": "0,1,2,3", "VLLM_USE_DEEP_GEMM": "0"}}),
       ("last good release", {"vllm_version": "0.23.0"}),
       ("Hopper", {"gpus": [{"name": "NVIDIA H100 80GB HBM3", "memory_gib": 80, "count": 4}]}))


# --------------------------------------------------------------------------- batch 13
expect("239", ("upx-rope-scaling-flag-removed",), "high",
       ("release with the flag", {"vllm_version": "0.11.0"}),
       ("hf-overrides", {"argv_replace": {"--rope-scaling": "--hf-overrides"}}))
expect("240", ("upx-qwen3-reranker-without-overrides",), "high",
       ("with overrides", {"argv_add": ["--hf-overrides",
                                        '{"architectures": ["Qwen3ForSequenceClassification"], '
                                        '"classifier_from_token": ["no", "yes"], '
                                        '"is_original_qwen3_reranker": true}']}))


# --------------------------------------------------------------------------- batch 14
expect("241", ("upx-parallel-size-exceeds-host-gpus",), "high",
       ("two GPUs", {"gpus": [{"name": "NVIDIA GB10", "memory_gib": 128, "count": 2}]}),
       ("Ray cluster", {"argv_add": ["--distributed-executor-backend", "ray"]}))


# --------------------------------------------------------------------------- batch 15
expect("242", ("upx-turboquant-kv-pre-ampere",), "high",
       ("Ampere", {"gpus": [{"name": "NVIDIA A10G", "memory_gib": 24, "count": 1}]}),
       ("auto KV", {"argv_set": {"--kv-cache-dtype": "auto"}}))


# --------------------------------------------------------------------------- batch 16
expect("243", ("upx-int4-awq-w4a16-below-min-capability",), "high",
       ("Turing", {"gpus": [{"name": "Tesla T4", "memory_gib": 16, "count": 1}]}),
       ("GPTQ checkpoint", {"argv_replace": {
           "/data/qwen1.5/Qwen1.5-32B-Chat-AWQ": "/data/qwen1.5/Qwen1.5-32B-Chat-GPTQ-Int4",
           "Qwen1.5-32B-Chat-AWQ": "Qwen1.5-32B-Chat-GPTQ-Int4"}}))


# --------------------------------------------------------------------------- batch 17
expect("244", ("upx-deepseek-v31-with-v3-tool-parser",), "high",
       ("deepseek_v31 parser", {"argv_set": {"--tool-call-parser": "deepseek_v31"}}))
expect("245", ("upx-deepseek-distill-with-deepseek-tool-parser",), "high",
       ("hermes parser", {"argv_set": {"--tool-call-parser": "hermes"}}),
       ("full DeepSeek-R1", {"argv_replace": {"deepseek-ai/DeepSeek-R1-0528-Qwen3-8B":
                                              "deepseek-ai/DeepSeek-R1-0528"}}))


# --------------------------------------------------------------------------- batch 18
expect("246", ("upx-kimi-without-trust-remote-code",), "high",
       ("trust remote code", {"argv_add": ["--trust-remote-code"]}))
expect("247", ("upx-max-seq-len-to-capture-removed",), "high",
       ("release with the flag", {"vllm_version": "0.10.0"}),
       ("replacement flag", {"argv_replace": {"--max-seq-len-to-capture":
                                              "--max-cudagraph-capture-size"}}))
expect("248", ("upx-llama32-small-json-tool-parser",), "medium",
       ("pythonic parser", {"argv_set": {"--tool-call-parser": "pythonic"}}),
       ("Llama 3.1 8B", {"argv_replace": {"meta-llama/Llama-3.2-3B-Instruct":
                                          "meta-llama/Llama-3.1-8B-Instruct"}}))
expect("249", ("upx-llama4-pythonic-parser-json-output",), "medium",
       ("JSON parser", {"argv_set": {"--tool-call-parser": "llama4_json"}}))


# --------------------------------------------------------------------------- batch 19
expect("250", ("upx-mistral-tokenizer-mode-with-hf-config",), "high",
       ("mistral formats", {"argv_add": ["--config-format", "mistral",
                                         "--load-format", "mistral"]}),
       ("HF tokenizer", {"argv_set": {"--tokenizer-mode": "auto"}}))


# --------------------------------------------------------------------------- batch 20
expect("251", ("upx-attention-backend-env-removed",), "medium",
       ("release that reads it", {"vllm_version": "0.14.1"}),
       ("CLI flag as well", {"argv_add": ["--attention-backend", "TRITON_ATTN"]}))
expect("252", ("upx-task-flag-removed",), "high",
       ("release with --task", {"vllm_version": "0.12.0"}),
       ("runner flag", {"argv_replace": {"--task=embed": "--runner=pooling"}}))
expect("253", ("upx-cpu-offload-gb-mrv2-noop",), "high",
       ("V1 runner forced", {"env": {"VLLM_USE_V2_MODEL_RUNNER": "0"}}),
       ("older release", {"vllm_version": "0.20.0"}))
expect("254", ("upx-ngram-spec-with-lora",), "high",
       ("no LoRA", {"argv_replace": {"--enable-lora": None}}),
       ("EAGLE speculator", {"argv_set": {
           "--speculative-config": '{"method": "eagle", "model": "yuhuili/EAGLE-llama2-chat-7B", '
                                   '"num_speculative_tokens": 5}'}}))


# --------------------------------------------------------------------------- batch 21
expect("255", ("upx-dsa-sparse-mla-fp8-e4m3-kv",), "high",
       ("fp8 (ds_mla layout)", {"argv_set": {"--kv-cache-dtype": "fp8"}}))
expect("256", ("upx-gptoss-non-openai-tool-parser",), "high",
       ("openai parser", {"argv_replace": {"--tool-call-parser=llama3_json":
                                           "--tool-call-parser=openai"}}))
expect("257", ("upx-minimax-m2-with-m1-chat-template",), "high",
       ("checkpoint template", {"argv_replace": {
           "--chat-template": None, "examples/tool_chat_template_minimax_m1.jinja": None}}))
expect("258", ("upx-qwen2-fp16-overflow",), "critical",
       ("bfloat16", {"argv_set": {"--dtype": "bfloat16"}}),
       ("Qwen3", {"argv_replace": {"Qwen/Qwen2.5-VL-3B-Instruct": "Qwen/Qwen3-VL-4B-Instruct"}}))


# --------------------------------------------------------------------------- batch 22
expect("259", ("upx-pascal-gpu-unsupported",), "critical",
       ("Turing", {"gpus": [{"name": "Tesla T4", "memory_gib": 16, "count": 2}]}))
expect("260", ("upx-awq-forced-legacy-kernel",), "medium",
       ("awq_marlin", {"argv_set": {"--quantization": "awq_marlin"}}),
       ("auto-detected", {"argv_replace": {"--quantization": None, "awq": None}}))
expect("261", ("upx-gh200-deepgemm-illegal-address",), "high",
       ("DeepGEMM off", {"env": {"VLLM_USE_DEEP_GEMM": "0"}}),
       ("H100", {"gpus": [{"name": "NVIDIA H100 80GB HBM3", "memory_gib": 80, "count": 2}]}))
expect("262", ("upx-dsv4-sm12x-boot-regression-0-27",), "high",
       ("0.26.0", {"vllm_version": "0.26.0"}),
       ("B200", {"gpus": [{"name": "NVIDIA B200", "memory_gib": 180, "count": 2}]}))


# --------------------------------------------------------------------------- batch 23
expect("263", ("upx-gptoss-mxfp4-below-ampere",), "critical",
       ("L4", {"gpus": [{"name": "NVIDIA L4", "memory_gib": 24, "count": 1}]}))
expect("264", ("upx-qwen3-vl-turing-vision-backend",), "high",
       ("A10G", {"gpus": [{"name": "NVIDIA A10G", "memory_gib": 24, "count": 1}]}),
       ("Qwen2.5-VL", {"argv_replace": {"Qwen/Qwen3-VL-4B-Instruct":
                                        "Qwen/Qwen2.5-VL-3B-Instruct"}}))


# --------------------------------------------------------------------------- batch 24
expect("265", ("upx-qwen3-needs-vllm-0-8-5",), "critical",
       ("0.8.5", {"vllm_version": "0.8.5"}))
expect("266", ("upx-qwen25-vl-needs-vllm-0-7-2",), "critical",
       ("0.7.2", {"vllm_version": "0.7.2"}))
expect("267", ("upx-glm4-hf-needs-vllm-0-6-5",), "critical",
       ("0.6.5", {"vllm_version": "0.6.5"}),
       ("original checkpoint", {"argv_replace": {"./glm-4-9b-chat-hf": "./glm-4-9b-chat"}}))
expect("268", ("upx-switchable-thinking-with-deepseek-r1-parser",), "medium",
       ("deepseek_v3 parser", {"argv_set": {"--reasoning-parser": "deepseek_v3"}}))


# --------------------------------------------------------------------------- batch 25
expect("269", ("upx-gptoss-forced-backend-without-sinks",), "high",
       ("auto backend", {"argv_replace": {"--attention-backend": None, "FLASHINFER": None}}),
       ("Triton backend", {"argv_set": {"--attention-backend": "TRITON_ATTN"}}))
expect("270", ("upx-disable-sliding-window-caps-max-len",), "medium",
       ("window kept", {"argv_replace": {"--disable-sliding-window": None}}),
       ("4k context", {"argv_set": {"--max-model-len": "4096"}}))
expect("271", ("upx-rocm-cdna3-mla-gluon-0-27",), "high",
       ("AITER MLA off", {"env": {"VLLM_ROCM_USE_AITER_MLA": "0"}}),
       ("MI355X", {"gpus": [{"name": "AMD Instinct MI355X", "memory_gib": 288, "count": 8}]}))


# --------------------------------------------------------------------------- batch 26
expect("272", ("upx-gptoss-no-tool-call-parser",), "low",
       ("openai parser", {"argv_add": ["--enable-auto-tool-choice", "--tool-call-parser",
                                       "openai"]}))


# --------------------------------------------------------------------------- batch 27
expect("273", ("upx-qwen-vl-fp8-e5m2-kv-corruption",), "critical",
       ("e4m3", {"argv_set": {"--kv-cache-dtype": "fp8_e4m3"}}))
expect("274", ("upx-dsv4-prefix-cache-never-hits",), "medium",
       ("prefix caching off", {"argv_replace": {"--enable-prefix-caching":
                                                "--no-enable-prefix-caching"}}),
       ("older release", {"vllm_version": "0.21.0"}))


# --------------------------------------------------------------------------- batch 28
expect("275", ("upx-glm4x-non-glm-tool-parser",), "high",
       ("glm4_moe parser", {"argv_set": {"--tool-call-parser": "glm4_moe"}}))
expect("276", ("upx-glm47-parser-zero-arg-tool-calls",), "medium",
       ("GLM-4.6", {"argv_replace": {"zai-org/GLM-4.7": "zai-org/GLM-4.6"}}))
expect("277", ("upx-kimi-k25-without-reasoning-parser",), "medium",
       ("kimi_k2 reasoning parser", {"argv_add": ["--reasoning-parser", "kimi_k2"]}))


# --------------------------------------------------------------------------- batch 29
expect("278", ("upx-llama4-max-len-below-attention-chunk",), "high",
       ("8k context", {"argv_set": {"--max-model-len": "8192"}}),
       ("0.8.4", {"vllm_version": "0.8.4"}))
expect("279", ("upx-tool-calling-on-base-checkpoint",), "medium",
       ("instruct checkpoint", {"argv_replace": {"mistralai/Mistral-Small-3.1-24B-Base-2503":
                                                 "mistralai/Mistral-Small-3.1-24B-Instruct-2503"}}))


# --------------------------------------------------------------------------- batch 30 (3NN)
# Second mining pass (rules now filed by subject in audit/rules).
A100x1 = [{"name": "NVIDIA A100-SXM4-80GB", "memory_gib": 80, "count": 1}]
TP_TO_PP = {"argv_replace": {"--tensor-parallel-size": "--pipeline-parallel-size"}}
expect("301", ("upx-int4-group-tp-misaligned",), "critical",
       ("TP 1", {"argv_set": {"--tensor-parallel-size": "1"}}),
       ("pipeline parallel", TP_TO_PP))
expect("302", ("upx-quantization-flag-checkpoint-mismatch",), "critical",
       ("method from config", {"argv_replace": {"--quantization": None, "gguf": None}}))
expect("303", ("upx-bnb-prequant-tensor-parallel",), "critical",
       ("pipeline parallel", TP_TO_PP))
expect("304", ("upx-bnb-model-unsupported-before-0-6-4",), "critical",
       ("0.6.4", {"vllm_version": "0.6.4"}),
       ("Llama checkpoint", {"argv_replace": {"unsloth/Qwen2.5-7B-Instruct-bnb-4bit":
                                              "unsloth/Meta-Llama-3.1-8B-Instruct-bnb-4bit"}}))
expect("305", ("upx-lora-rank-above-default-max",), "low",
       ("rank set", {"argv_add": ["--max-lora-rank", "64"]}))
expect("306", ("upx-phi4-multimodal-without-lora",), "high",
       ("LoRA adapters", {"argv_add": ["--enable-lora", "--max-lora-rank", "320",
                                       "--max-loras", "2", "--lora-modules",
                                       "speech=/models/phi4mm/speech-lora",
                                       "vision=/models/phi4mm/vision-lora"]}))
expect("307", ("upx-gemma3-needs-vllm-0-8",), "critical",
       ("0.8.0", {"vllm_version": "0.8.0"}))
expect("308", ("upx-deepseek-v3-needs-vllm-0-6-6",), "critical",
       ("0.6.6", {"vllm_version": "0.6.6"}),
       ("R1 distill", {"argv_replace": {"deepseek-ai/DeepSeek-V3":
                                        "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B"}}))
expect("309", ("upx-llama4-needs-vllm-0-8-3",), "critical",
       ("0.8.3", {"vllm_version": "0.8.3"}))
expect("310", ("upx-llama31-rope-needs-vllm-0-5-3",), "critical",
       ("0.5.3.post1", {"vllm_version": "0.5.3.post1"}),
       ("Llama 2", {"argv_replace": {"meta-llama/Meta-Llama-3.1-8B-Instruct":
                                     "meta-llama/Llama-2-7b-chat-hf"}}))
expect("311", ("upx-gemma2-softcap-needs-flashinfer",), "critical",
       ("FlashInfer backend", {"env": {"VLLM_ATTENTION_BACKEND": "FLASHINFER"}}),
       ("0.5.4", {"vllm_version": "0.5.4"}))
expect("312", ("upx-remote-code-model-without-trust",), "critical",
       ("trusted", {"argv_add": ["--trust-remote-code"]}))
expect("313", ("upx-vllm-use-v1-zero-after-v0-removal",), "medium",
       ("0.10.2", {"vllm_version": "0.10.2"}),
       ("variable dropped", {"env": {}}))
expect("314", ("upx-v1-engine-forced-pre-ampere-0-7",), "high",
       ("V0 engine", {"env": {}}),
       ("A100", {"gpus": A100x1}))
expect("315", ("upx-flash-attn-3-unsupported-gpu",), "low",
       ("H100", {"gpus": H100}),
       ("FA chosen by vLLM", {"env": {}}))
expect("316", ("upx-async-scheduling-with-spec-decode-early",), "high",
       ("sync scheduling", {"argv_replace": {"--async-scheduling": None}}),
       ("0.12.0", {"vllm_version": "0.12.0"}))
expect("317", ("upx-async-scheduling-with-pipeline-parallel-early",), "high",
       ("sync scheduling", {"argv_replace": {"--async-scheduling": None}}))
expect("318", ("upx-tokenizer-mode-slow-removed",), "high",
       ("0.30.0", {"vllm_version": "0.30.0"}),
       ("auto mode", {"argv_set": {"--tokenizer-mode": "auto"}}))
expect("319", ("upx-spec-medusa-mlp-speculator-removed",), "high",
       ("0.32.0", {"vllm_version": "0.32.0"}))
expect("320", ("upx-mistral-tool-call-ids-before-0-6-3",), "high",
       ("0.6.3", {"vllm_version": "0.6.3"}))
T4x2 = [{"name": "Tesla T4", "memory_gib": 16, "count": 2}]
A10G = [{"name": "NVIDIA A10G", "memory_gib": 24, "count": 1}]
expect("321", ("upx-int4-moe-tp-block-size-k",), "critical",
       ("TP 2", {"argv_set": {"--tensor-parallel-size": "2"}}),
       ("expert parallel", {"argv_add": ["--enable-expert-parallel"]}))
expect("322", ("upx-qwen2-vl-needs-vllm-0-6-1",), "critical",
       ("0.6.1", {"vllm_version": "0.6.1"}))
expect("323", ("upx-qwen3-vl-needs-vllm-0-11",), "critical",
       ("0.11.0", {"vllm_version": "0.11.0"}))
expect("324", ("upx-llama32-vision-needs-vllm-0-6-2",), "critical",
       ("0.6.2", {"vllm_version": "0.6.2"}))
expect("325", ("upx-gguf-qwen3-vl-unsupported",), "critical",
       ("safetensors repo", {"argv_replace": {
           "/root/.cache/huggingface/hub/models--Qwen--Qwen3-VL-30B-A3B-Instruct-GGUF/snapshots/"
           "f54435e6cc31258f04b0969105c3f6badb197931/Qwen3VL-30B-A3B-Instruct-Q4_K_M.gguf":
           "Qwen/Qwen3-VL-30B-A3B-Instruct"}}))
expect("326", ("upx-gguf-sharded-file",), "high",
       ("merged file", {"argv_replace": {
           "/media/vol/runs/vlm/checkpoints/Qwen3-VL-235B-A22B-Instruct-UD-Q4_K_XL-00001-of-00003.gguf":
           "/media/vol/runs/vlm/checkpoints/Qwen3-VL-235B-A22B-Instruct-UD-Q4_K_XL.gguf"}}))
expect("327", ("upx-int8-w8a8-turing-0-6-3",), "critical",
       ("0.6.2", {"vllm_version": "0.6.2"}),
       ("A10G", {"gpus": A10G}))
expect("328", ("upx-pixtral-mistral-format-rocm",), "high",
       ("HF format", {"argv_replace": {"mistralai/Pixtral-12B-2409":
                                       "mistral-community/pixtral-12b",
                                       "--tokenizer-mode": None, "mistral": None}}),
       ("NVIDIA GPU", {"gpus": H100}))
expect("329", ("upx-flexattention-sliding-window-pre-ampere",), "medium",
       ("Triton attention", {"argv_add": ["--attention-backend", "TRITON_ATTN"]}),
       ("A10G", {"gpus": A10G}))
expect("330", ("upx-compressed-tensors-awq-turing-before-0-12",), "critical",
       ("0.12.0", {"vllm_version": "0.12.0"}),
       ("A10G", {"gpus": A10G}))
expect("331", ("upx-reasoning-parser-without-enable-reasoning",), "medium",
       ("enabled", {"argv_add": ["--enable-reasoning"]}),
       ("0.9.0", {"vllm_version": "0.9.0"}))
expect("332", ("upx-gptoss-needs-vllm-0-10-1",), "critical",
       ("0.10.1", {"vllm_version": "0.10.1"}))
expect("333", ("upx-spec-decode-with-structured-output-early",), "medium",
       ("no speculator", {"argv_replace": {
           "--speculative-model": None, "neuralmagic/Llama-3.2-3B-Instruct-FP8-dynamic": None,
           "--num-speculative-tokens": None, "5": None}}))
expect("334", ("upx-deepseek-v3-pipeline-parallel-0-6-6",), "critical",
       ("no PP", {"argv_set": {"--pipeline-parallel-size": "1"}}))
expect("335", ("upx-v1-engine-forced-spec-decode-0-7",), "high",
       ("V0 engine", {"env": {}}))
expect("336", ("upx-gemma2-needs-vllm-0-5-1",), "critical",
       ("0.5.1", {"vllm_version": "0.5.1"}))
expect("337", ("upx-glm45v-needs-vllm-0-10-1",), "critical",
       ("0.10.1", {"vllm_version": "0.10.1"}))
expect("338", ("upx-openai-tool-parser-before-0-10-2",), "critical",
       ("0.10.2", {"vllm_version": "0.10.2"}))
expect("339", ("upx-tool-parser-beyond-hermes-mistral-before-0-6-3",), "critical",
       ("0.6.3", {"vllm_version": "0.6.3"}),
       ("hermes parser", {"argv_set": {"--tool-call-parser": "hermes"}}))
expect("340", ("upx-olmo2-needs-vllm-0-6-5",), "critical",
       ("0.6.5", {"vllm_version": "0.6.5"}))
expect("341", ("upx-olmo-original-format-unsupported",), "critical",
       ("-hf conversion", {"argv_replace": {"allenai/OLMo-7B": "allenai/OLMo-7B-hf"}}))
