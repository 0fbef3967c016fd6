"""Flag-level repairs keyed by rule id: how the recommendation clears a finding.

When the self-check (advice.recommend.asif) raises a finding above medium, the repair for
that rule changes the plan and the check runs again. Rules whose cure is a different vLLM
release have no repair here: the version search (advice.recommend.core) handles them. Each
repair records the rule id and the rule's own references as the reason, so the diff cites
the knowledge that drove it. Pure functions over :class:`~advice.recommend.plan.Plan`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from advice.recommend import data
from advice.recommend.gemma import groups_for, template_fingerprint, vetted_template
from advice.recommend.plan import Plan
from advice.recommend.steer import follow, steer_of
from audit.kb.catalogue import parsers
from audit.kb.engine import FindingResult

Repair = Callable[[Plan, dict[str, Any], FindingResult, dict[str, Any]], bool]


def _why(finding: FindingResult, text: str) -> str:
    return f"{text} (clears {finding.rule_id}: {finding.title})"


def _tp(plan: Plan, ctx: dict, finding: FindingResult, env: dict) -> bool:
    """Largest TP <= the server's GPUs that divides the attention heads (or a power of 2)."""
    heads = ctx["geometry"].get("num_attention_heads")
    gpus = env["gpus"]
    for tp in (8, 4, 2, 1):
        if tp <= len(gpus) and tp != plan.tp and (heads is None or heads % tp == 0):
            plan.groups = groups_for(gpus, tp)
            plan.set("tensor_parallel_size", tp, _why(finding, f"TP={tp} divides the model's "
                     f"{heads or 'unknown number of'} attention heads"), finding.references)
            return True
    return False


def _max_len(plan: Plan, ctx: dict, finding: FindingResult, env: dict) -> bool:
    single = ctx["geometry"].get("single_request_max_tokens_estimate")
    step, margin = int(data.limit("max_model_len_step")), data.limit("kv_margin")
    extra = None
    if single:
        text = f"one request holds about {single} tokens (geometry estimate)"
    else:
        single = _half_budget_tokens(ctx)
        text = f"about {single} tokens keep one request's KV within half the memory budget"
        extra = ("this model's weight size is not in the geometry table; the bound is the "
                 "rule's own half-budget test: use 95% of the engine's logged maximum instead")
    if not single:
        return False
    value = int(single * (1 - margin)) // step * step
    if value <= 0 or value == plan.values.get("max_model_len"):
        return False
    plan.set("max_model_len", value, _why(finding, f"{text} minus {int(margin * 100)}%"),
             finding.references, extra)
    return True


def _half_budget_tokens(ctx: dict) -> int | None:
    """Tokens whose global-layer KV fills half of memory x util (the bound of rule
    up-max-model-len-default-exceeds-kv, used when weights are unknown)."""
    per_token = ctx["geometry"].get("kv_bytes_per_token_global")
    memory = ctx["gpu"].get("memory_gib")
    util = ctx["flags"].get("gpu_memory_utilization") or 0.9
    if not per_token or not memory:
        return None
    return int(0.5 * memory * util * 2**30 / per_token)


def _max_num_seqs(plan: Plan, ctx: dict, finding: FindingResult, env: dict) -> bool:
    knee = ctx["gpu"].get("bandwidth_knee_max_num_seqs")
    value = knee * plan.tp if knee else 64
    if plan.values.get("max_num_seqs") == value:
        return False
    plan.set("max_num_seqs", value, _why(finding, "set explicitly instead of the version's "
             f"default ({'bandwidth knee x TP' if knee else 'conservative 64'})"),
             finding.references, "knee scaled by bandwidth; not measured for this model")
    return True


def _util(plan: Plan, ctx: dict, finding: FindingResult, env: dict) -> bool:
    cliff = data.limit("util_cliff")
    current = plan.values.get("gpu_memory_utilization")
    if isinstance(current, float) and current <= cliff and finding.rule_id != \
            "gpu-memory-utilization-multimodal-traffic":
        return False
    value = data.limit("util_multimodal") if "multimodal" in finding.rule_id else cliff
    plan.set("gpu_memory_utilization", value, _why(finding, f"{value}: below the CUDA-graph "
             "capture cliff"), [data.source("limits", "util_cliff"), *finding.references])
    return True


def _weights(plan: Plan, ctx: dict, finding: FindingResult, env: dict) -> bool:
    """More tensor parallel when the server has GPUs to spare (TP x PP within them); else
    nothing to do here."""
    heads = ctx["geometry"].get("num_attention_heads")
    pp = plan.values.get("pipeline_parallel_size")
    pp = pp if isinstance(pp, int) and pp > 0 else 1
    for tp in (2, 4, 8):
        if plan.tp < tp and tp * pp <= len(env["gpus"]) and (heads is None or heads % tp == 0):
            plan.groups = groups_for(env["gpus"], tp)
            plan.set("tensor_parallel_size", tp, _why(finding, f"TP={tp} splits the weights "
                     "so KV has room"), finding.references)
            return True
    return False


def _kv_auto(plan: Plan, ctx: dict, finding: FindingResult, env: dict) -> bool:
    if plan.values.get("kv_cache_dtype") in (None, "auto"):
        return False
    plan.drop("kv_cache_dtype", _why(finding, "KV cache in the model dtype"),
              finding.references)
    return True


def _dtype_bf16(plan: Plan, ctx: dict, finding: FindingResult, env: dict) -> bool:
    if plan.values.get("dtype") == "bfloat16":
        return False
    plan.set("dtype", "bfloat16", _why(finding, "bfloat16 activations"), finding.references)
    return True


def _bf16_if_capable(plan: Plan, ctx: dict, finding: FindingResult, env: dict) -> bool:
    """bfloat16 where the GPU has it (compute capability 8.0+); no flag fixes older GPUs."""
    cc = ctx["gpu"].get("cc")
    if not isinstance(cc, (int, float)) or cc < 8.0:
        return False
    return _dtype_bf16(plan, ctx, finding, env)


def _trust_remote_code(plan: Plan, ctx: dict, finding: FindingResult, env: dict) -> bool:
    if plan.values.get("trust_remote_code") is True:
        return False
    plan.set("trust_remote_code", True, _why(finding, "the model's architecture ships as "
             "remote code: review the repository's code before running it"),
             finding.references)
    return True


def _pp_to_tp(plan: Plan, ctx: dict, finding: FindingResult, env: dict) -> bool:
    """Pipeline stages become tensor-parallel ranks (same GPUs) when the heads allow it."""
    pp = plan.values.get("pipeline_parallel_size")
    if not isinstance(pp, int) or pp <= 1:
        return False
    tp = plan.tp * pp
    heads = ctx["model"].get("arch", {}).get("num_attention_heads") \
        or ctx["geometry"].get("num_attention_heads")
    if tp > len(env["gpus"]) or (heads and heads % tp):
        return False
    plan.set("pipeline_parallel_size", None, _why(finding, "no pipeline parallelism for "
             "this architecture"), finding.references)
    plan.set("tensor_parallel_size", tp, _why(finding, f"TP={tp} on the same GPUs instead "
             f"of {plan.tp} x PP={pp}"), finding.references)
    plan.groups = groups_for(env["gpus"], tp)
    return True


def _set_env(name: str, value: str, text: str) -> Repair:
    def repair(plan: Plan, ctx: dict, finding: FindingResult, env: dict) -> bool:
        if plan.env.get(name) == value:
            return False
        plan.env[name] = value
        plan.notes.append(f"{name}={value} is set in the command's environment: {text} "
                          f"(clears {finding.rule_id}).")
        return True
    return repair


def _parallel_within_gpus(plan: Plan, ctx: dict, finding: FindingResult, env: dict) -> bool:
    """TP x PP brought within the server's GPUs: PP first, then the largest TP that fits."""
    gpus = len(env["gpus"])
    pp = plan.values.get("pipeline_parallel_size")
    pp = pp if isinstance(pp, int) and pp > 0 else 1
    if plan.tp * pp <= gpus:
        return False
    if pp > 1:
        plan.set("pipeline_parallel_size", None, _why(finding, f"TP x PP within the {gpus} "
                 "GPU(s) of this server"), finding.references)
    heads = ctx["geometry"].get("num_attention_heads")
    tp = next((t for t in (8, 4, 2, 1) if t <= min(gpus, plan.tp) and
               (heads is None or heads % t == 0)), 1)
    if tp != plan.tp:
        plan.set("tensor_parallel_size", tp, _why(finding, f"TP={tp} within the {gpus} "
                 "GPU(s) of this server"), finding.references)
    plan.groups = groups_for(env["gpus"], tp)
    return True


def _reasoning_of_record(plan: Plan, ctx: dict, finding: FindingResult, env: dict) -> bool:
    """The family's reasoning parser of record (audit/kb/data/parsers.yaml)."""
    value = parser_of_record(ctx, "reasoning")
    if value is None or plan.values.get("reasoning_parser") == value:
        return False
    plan.set("reasoning_parser", value, _why(finding, f"{value}: the reasoning parser the "
             f"vLLM docs give for {ctx['model'].get('family')}"), finding.references)
    return True


def _removed(plan: Plan, ctx: dict, finding: FindingResult, env: dict) -> bool:
    changed = False
    for item in ctx["flags_meta"].get("removed") or []:
        key = item["flag"].lstrip("-").replace("-", "_")
        if plan.values.get(key) is not None:
            plan.drop(key, _why(finding, f"removed in vLLM {item['removed_in']}; use "
                      f"{item['replacement']}"), [item["source"], *finding.references])
            changed = True
    return changed


def _tool_parser(plan: Plan, ctx: dict, finding: FindingResult, env: dict) -> bool:
    value = "gemma4" if ctx["model"].get("is_gemma4") else parser_of_record(ctx, "tool")
    if plan.values.get("tool_call_parser") == value:
        return False
    plan.set("tool_call_parser", value, _why(finding, "the parser that matches this model's "
             "tool-call format" if value else "no parser known to match this model"),
             finding.references)
    if value is None and plan.values.get("enable_auto_tool_choice"):
        plan.drop("enable_auto_tool_choice", "needs a tool-call parser", finding.references)
    return True


def parser_of_record(ctx: dict, kind: str) -> str | None:
    """The parser the vLLM docs give for this server's decided family (``kind``: "tool" or
    "reasoning"; audit/kb/data/parsers.yaml ``family_*_parser``), or None."""
    table = parsers()
    family = ctx["model"].get("family")
    if not ctx["model"].get("family_decided") or not family:
        return None
    if kind == "tool":
        coder = table.get("coder_tool_call_parser") or {}
        model = " ".join(str(h) for h in ctx["model"].get("hints") or []).lower()
        if family in coder.get("families", []) and \
                any(m in model for m in coder.get("coder_markers", [])):
            return coder["parser"]
        return (table.get("family_tool_call_parser") or {}).get(family)
    return (table.get("family_reasoning_parser") or {}).get(family)


def _family_parsers(plan: Plan, ctx: dict, finding: FindingResult, env: dict) -> bool:
    """Each mismatched parser becomes the family's parser of record (one flag), or is
    dropped when the family has none."""
    changed = False
    fits = ctx["model"].get("parsers") or {}
    for key, kind, fit in (("tool_call_parser", "tool", "tool_fits"),
                           ("reasoning_parser", "reasoning", "reasoning_fits")):
        if fits.get(fit) is not False:
            continue
        value = parser_of_record(ctx, kind)
        if plan.values.get(key) == value:
            continue
        family = ctx["model"].get("family")
        plan.set(key, value, _why(finding, f"{value}: the {kind} parser the vLLM docs give "
                 f"for {family}" if value else f"no {kind} parser known for {family}"),
                 finding.references)
        if key == "tool_call_parser" and value is None and plan.values.get(
                "enable_auto_tool_choice"):
            plan.drop("enable_auto_tool_choice", "needs a tool-call parser",
                      finding.references)
        changed = True
    return changed


def _reasoning_parser(plan: Plan, ctx: dict, finding: FindingResult, env: dict) -> bool:
    value = "gemma4" if ctx["model"].get("is_gemma4") else None
    if plan.values.get("reasoning_parser") == value:
        return False
    plan.set("reasoning_parser", value, _why(finding, "the reasoning parser of this model "
             "family" if value else "gemma4 parser on a non-Gemma 4 model"), finding.references)
    return True


def _spec_method_mtp(plan: Plan, ctx: dict, finding: FindingResult, env: dict) -> bool:
    config = dict(plan.values.get("speculative_config") or {})
    if not config or config.get("method") == "mtp":
        return False
    config["method"] = "mtp"
    plan.set("speculative_config", config, _why(finding, "a Gemma 4 assistant checkpoint "
             "is an MTP drafter"), finding.references)
    return True


def _spec_replace(plan: Plan, ctx: dict, finding: FindingResult, env: dict) -> bool:
    """EAGLE3 for the 31B (R5), otherwise no speculator."""
    entry = data.speculators(ctx["model"].get("family")).get("eagle3")
    current = plan.values.get("speculative_config")
    if entry and ctx["model"].get("quantization") in entry["targets"]:
        if current == entry["config"]:
            return False
        plan.set("speculative_config", dict(entry["config"]), _why(
            finding, "EAGLE3, the speculator the seeds measured on quantized targets"),
            [entry["source"], *finding.references],
            data.not_measured("num_speculative_tokens"))
        return True
    if current is None:
        return False
    plan.drop("speculative_config", _why(finding, "no measured-good speculator for this "
              "target"), finding.references)
    return True


def _parallel_drafting(plan: Plan, ctx: dict, finding: FindingResult, env: dict) -> bool:
    config = dict(plan.values.get("speculative_config") or {})
    if not config.pop("parallel_drafting", None):
        return False
    plan.set("speculative_config", config, _why(finding, "parallel_drafting removed: the "
             "checkpoint is vanilla EAGLE3"), finding.references)
    return True


def _reasoning_from_finding(plan: Plan, ctx: dict, finding: FindingResult, env: dict) -> bool:
    """The reasoning parser the finding chose for this release and template (its evidence
    ``parser``), with --enable-reasoning where that release applies a parser only with it:
    the command then says what the finding says."""
    evidence = finding.evidence if isinstance(finding.evidence, dict) else {}
    value, changed = evidence.get("parser"), False
    if isinstance(value, str) and value and plan.values.get("reasoning_parser") != value:
        plan.set("reasoning_parser", value, _why(finding, f"{value} separates the thinking "
                 "from the answer"), finding.references)
        changed = True
    if evidence.get("enable_reasoning") is True and not plan.values.get("enable_reasoning"):
        plan.set("enable_reasoning", True, _why(finding, "this release applies the reasoning "
                 "parser only with --enable-reasoning"), finding.references)
        changed = True
    return changed


def _set_value(key: str, value: Any, text: str) -> Repair:
    def repair(plan: Plan, ctx: dict, finding: FindingResult, env: dict) -> bool:
        if plan.values.get(key) == value:
            return False
        plan.set(key, value, _why(finding, text), finding.references)
        return True
    return repair


def _template(plan: Plan, ctx: dict, finding: FindingResult, env: dict) -> bool:
    row = vetted_template()
    path = f"/templates/gemma-4-chat-template-{row['revision']}.jinja"
    if plan.values.get("chat_template") == path:
        return False
    plan.set("chat_template", path, _why(finding, f"vetted template pinned by revision "
             f"{row['revision']}"), [row["source"], *finding.references])
    plan.template = template_fingerprint(row, path)
    return True


def _thinking(plan: Plan, ctx: dict, finding: FindingResult, env: dict) -> bool:
    kwargs = dict(plan.values.get("default_chat_template_kwargs") or {})
    if "enable_thinking" in kwargs:
        return False
    kwargs["enable_thinking"] = False
    plan.set("default_chat_template_kwargs", kwargs, _why(finding, "enable_thinking set "
             "explicitly"), finding.references)
    return True


def _batched(plan: Plan, ctx: dict, finding: FindingResult, env: dict) -> bool:
    memory = ctx["gpu"].get("memory_gib") or 0
    value = data.recipe("LIGHT")["max_num_batched_tokens"] if memory >= 70 else 4096
    current = plan.values.get("max_num_batched_tokens")
    if isinstance(current, int) and current >= value:
        return False
    plan.set("max_num_batched_tokens", value, _why(finding, "a prefill chunk large enough for "
             "one image"), finding.references, None if memory >= 70 else
             "half of LIGHT's 8192 on a card under 70 GiB")
    return True


REPAIRS: dict[str, Repair] = {
    "up-tp-not-dividing-attention-heads": _tp,
    "up-max-model-len-default-exceeds-kv": _max_len,
    "max-model-len-above-kv-estimate": _max_len,
    "max-model-len-kv-cliff-edge": _max_len,
    "up-v1-default-max-num-seqs-oom": _max_num_seqs,
    "up-mllama-default-max-num-seqs-oom": _max_num_seqs,
    "up-gpu-mem-util-no-cudagraph-headroom": _util,
    "gpu-memory-utilization-capture-cliff": _util,
    "gpu-memory-utilization-multimodal-traffic": _util,
    "up-weights-leave-no-kv-headroom": _weights,
    "up-fp8-kv-flashinfer-hopper": _kv_auto,
    "up-mla-fp8-kv-cache": _kv_auto,
    "up-fp8-kv-pre-ada": _kv_auto,
    "up-gemma4-mtp-fp8-kv-scales": _kv_auto,
    "up-gemma2-gemma3-fp16": _dtype_bf16,
    "upx-qwen2-fp16-overflow": _bf16_if_capable,
    "upx-remote-code-model-without-trust": _trust_remote_code,
    "upb-pipeline-parallel-unsupported-architecture": _pp_to_tp,
    "upx-hybrid-mtp-prefix-cache-corruption": _set_value(
        "enable_prefix_caching", False, "prefix caching off while MTP runs on this hybrid"),
    "mf-weights-do-not-fit": _weights,
    "upx-qwen3-deepseek-r1-reasoning-parser": _set_value(
        "reasoning_parser", "qwen3", "qwen3 handles replies without a think block"),
    "up-qwen3-hybrid-thinking-without-reasoning-parser": _reasoning_from_finding,
    "upx-kimi-k25-without-reasoning-parser": _set_value(
        "reasoning_parser", "kimi_k2", "kimi_k2 separates the reasoning"),
    "upx-deepep-without-expert-parallel": _set_value(
        "enable_expert_parallel", True, "DeepEP is an expert-parallel backend"),
    "known-tool-parser-unused-without-auto-tool-choice": _set_value(
        "enable_auto_tool_choice", True, "the release loads the tool parser only with it"),
    "known-gptq-bitblas-override-pre-ampere-0-8-5": _set_value(
        "quantization", "gptq", "gptq keeps the exllama kernels instead of gptq_bitblas"),
    "upx-awq-forced-legacy-kernel": _set_value(
        "quantization", None, "vLLM picks awq_marlin for an AWQ checkpoint by itself"),
    "upx-gptoss-forced-backend-without-sinks": _set_value(
        "attention_backend", None, "let vLLM pick a sink-capable attention backend"),
    "upx-dsa-sparse-mla-fp8-e4m3-kv": _set_value(
        "kv_cache_dtype", "fp8", "fp8 maps to the fp8_ds_mla layout sparse MLA needs"),
    "upx-parallel-size-exceeds-host-gpus": _parallel_within_gpus,
    "upx-geforce-tp-nccl-p2p": _set_env(
        "NCCL_P2P_DISABLE", "1", "GeForce cards have no peer-to-peer path NCCL can trust"),
    "up-gemma4-vision-fp16-overflow": _dtype_bf16,
    "up-removed-flags": _removed,
    "up-tool-parser-model-mismatch": _tool_parser,
    "mf-parser-family-mismatch": _family_parsers,
    "up-reasoning-parser-model-mismatch": _reasoning_parser,
    "up-gemma4-assistant-wrong-spec-method": _spec_method_mtp,
    "up-gemma4-mtp-sm100-flashinfer-hd512": _set_value(
        "attention_backend", "TRITON_ATTN", "TRITON_ATTN explicitly"),
    "gemma4-attention-backend-override": _set_value(
        "attention_backend", None, "let vLLM pick TRITON_ATTN for Gemma 4"),
    "gemma4-chat-template-frozen": _template,
    "gemma4-chat-template-intermediate": _template,
    "cyankiwi-revision-pin-squashed": _set_value(
        "revision", None, "pre-squash revision pins 404 on a cold boot"),
    "gemma4-streamed-turn-leak": _thinking,
    "gemma4-streamed-turn-leak-untested": _thinking,
    "gemma4-mtp-amplifies-turn-leak": _thinking,
    "up-gemma4-mm-batched-tokens-below-image": _batched,
    "upx-gemma4-mm-default-batched-tokens-below-image": _batched,
    "upx-hybrid-default-max-num-seqs-mamba-blocks": _max_num_seqs,
    "spec-parallel-drafting-vanilla-eagle3": _parallel_drafting,
    "gemma4-mtp-on-int4-target": _spec_replace,
    "spec-dflash-on-ada": _spec_replace,
    "gemma4-31b-dspark-speculator-fails": _spec_replace,
    "up-gemma4-mtp-ascend-zero-acceptance": _spec_replace,
}
# Speculator rules whose cure may be another release: dropped only when no release is clean.
SPEC_VERSION_RULES = frozenset({
    "up-gemma4-mtp-stable-release-cannot-load", "up-gemma4-mtp-preview-build",
    "up-gemma4-mtp-embedding-guard-init-crash", "eagle-tp-drafter-mismatch-advisory",
    "gemma4-mrv2-kv-overreport-oom",
})


def repair(plan: Plan, ctx: dict[str, Any], findings: list[FindingResult], env: dict[str, Any],
           drop_speculator: bool = False) -> bool:
    """Apply the repair of every blocking finding; True when the plan changed."""
    changed = False
    for finding in findings:
        fix = REPAIRS.get(finding.rule_id)
        if fix is None and drop_speculator and finding.rule_id in SPEC_VERSION_RULES:
            fix = _spec_replace
        if fix is None and steer_of(finding) is not None:
            fix = follow  # the finding says which way its flag moves
        if fix is not None and fix(plan, ctx, finding, env):
            changed = True
    return changed

