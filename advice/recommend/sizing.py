"""TP, max_model_len and max_num_seqs for any model with a readable config.

Used for models without a seed operating point: the same per-GPU memory budget the rules see
(:func:`audit.kb.memory.memory_budget`) is computed for each tensor-parallel size the GPUs
allow (attention heads divisible by TP; KV heads divisible by TP or TP by them, as vLLM
checks), smallest first. The first TP whose weights fit and whose KV pool holds one request of
``min(current max_model_len, MIN_CONTEXT)`` tokens is kept; ``max_model_len`` is lowered to
95 % of the longest request that pool holds when the current one does not fit; a hybrid
model's ``max_num_seqs`` is lowered below its state blocks. When no TP fits, the answer is a
refusal carrying the numbers of the largest TP tried.
"""

from __future__ import annotations

from typing import Any

from advice.recommend.gemma import groups_for
from advice.recommend.plan import Plan
from audit.kb.memory import memory_budget

#: Shortest context worth serving when the configured one cannot fit (tokens).
MIN_CONTEXT = 8192
#: Safety margin under the estimated pool (the estimate is within ~20 % of the engine's).
MARGIN = 0.05
#: Estimated weights prove a misfit only when they exceed the budget by this factor (the
#: parameters-x-bytes estimate leaves out norms, biases and scales: audit.kb.modelparams).
ESTIMATE_MARGIN = 1.2
REFS = ["https://github.com/vllm-project/vllm/issues/10517",
        "https://github.com/vllm-project/vllm/issues/5711"]
HYBRID_REFS = ["https://github.com/vllm-project/vllm/issues/49064"]


def valid_tps(arch: dict[str, Any], n_gpus: int) -> list[int]:
    """Tensor-parallel sizes (powers of two up to the GPU count) vLLM accepts for the heads."""
    heads, kv = arch.get("num_attention_heads"), arch.get("kv_heads")
    out = []
    for tp in (1, 2, 4, 8, 16):
        if tp > n_gpus or (heads and heads % tp):
            continue
        if kv and not arch.get("is_mla") and kv % tp and tp % kv:
            continue
        out.append(tp)
    return out


def _budget(ctx: dict[str, Any], tp: int, max_model_len: int | None) -> dict[str, Any]:
    flags, model, memory = ctx["flags"], ctx["model"], ctx["memory"]
    util = flags.get("gpu_memory_utilization")
    weights = model["files"].get("weights_bytes")
    if weights is None and memory.get("weights_gib") is not None and not memory.get("estimate"):
        weights = int(memory["weights_gib"] * 2**30 * memory_tp(ctx))
    return memory_budget(
        model["arch"], weights_bytes=weights, quant=model.get("quantization"),
        drafter_bytes=int((memory.get("drafter_gib") or 0) * 2**30 * memory_tp(ctx)),
        tp=tp, pp=1, memory_gib=ctx["gpu"].get("min_memory_gib"),
        util=util if isinstance(util, float) else 0.9,
        kv_cache_dtype=flags.get("kv_cache_dtype"), max_model_len=max_model_len,
        max_num_batched_tokens=flags.get("max_num_batched_tokens")
        if isinstance(flags.get("max_num_batched_tokens"), int) else None,
        chunked_prefill=flags.get("enable_chunked_prefill"), block_size=None)


def memory_tp(ctx: dict[str, Any]) -> int:
    """TP x PP of the running server (the divisor its memory block used)."""
    flags = ctx["flags"]
    tp = flags.get("tensor_parallel_size") if isinstance(flags.get("tensor_parallel_size"),
                                                         int) else 1
    pp = flags.get("pipeline_parallel_size") if isinstance(flags.get("pipeline_parallel_size"),
                                                           int) else 1
    return max(1, tp) * max(1, pp)


def size_plan(plan: Plan, ctx: dict[str, Any], gpus: list[dict[str, Any]]
              ) -> dict[str, Any] | None:
    """Set TP / max_model_len / max_num_seqs on ``plan``; a misfit dict when nothing fits."""
    arch = ctx["model"]["arch"]
    want = ctx["flags"].get("max_model_len")
    want = want if isinstance(want, int) else arch.get("derived_max_model_len")
    native = (ctx.get("server_model") or {}).get("native_context")
    if want and native and want > native:  # vLLM refuses a length above the native one
        want = native
    need = min(want or MIN_CONTEXT, MIN_CONTEXT)
    tried = None
    for tp in valid_tps(arch, len(gpus)):
        budget = _budget(ctx, tp, want)
        tried = (tp, budget)
        longest = budget.get("single_request_max_tokens") or 0
        if budget.get("fits_weights") and (budget.get("kv_gib") or 0) > 0 and longest >= need:
            _apply(plan, ctx, gpus, tp, budget, want)
            return None
    return _misfit(ctx, gpus, tried)


def _apply(plan: Plan, ctx: dict[str, Any], gpus: list[dict], tp: int,
           budget: dict[str, Any], want: int | None) -> None:
    arithmetic = "; ".join(budget["arithmetic"][:2])
    if tp != memory_tp(ctx):
        plan.groups = groups_for(gpus, tp)
        plan.set("tensor_parallel_size", tp,
                 f"TP={tp} is the smallest size at which the weights fit and one "
                 f"{min(want or MIN_CONTEXT, MIN_CONTEXT)}-token request fits ({arithmetic})",
                 REFS)
    longest = budget.get("single_request_max_tokens") or 0
    if want and longest < want:
        value = int(longest * (1 - MARGIN)) // 1024 * 1024
        plan.set("max_model_len", value,
                 f"{value} tokens: one request of {want} needs {budget['request_gib']} GiB of "
                 f"KV per GPU but the pool holds about {longest} tokens ({arithmetic}), minus "
                 f"{int(MARGIN * 100)}%", REFS)
    seqs, blocks = ctx["flags"].get("max_num_seqs"), budget.get("state_capacity_seqs")
    if ctx["model"]["arch"].get("is_hybrid") and blocks and isinstance(seqs, int) \
            and seqs > blocks:
        value = max(1, int(blocks * (1 - MARGIN)))
        plan.set("max_num_seqs", value,
                 f"{value}: each running sequence holds one linear-attention/Mamba state "
                 f"block and the pool has about {blocks} ({budget['arithmetic'][-1]})",
                 HYBRID_REFS)


def _misfit(ctx: dict[str, Any], gpus: list[dict], tried: Any) -> dict[str, Any]:
    """``{reason, numbers, provable, missing}``: ``provable`` only when the arithmetic ran
    on known weights and memory and came out short; else ``missing`` names what the budget
    lacked ("cannot size", never "does not fit")."""
    if tried is None:
        return {"reason": f"no tensor-parallel size divides the model's "
                          f"{ctx['model']['arch'].get('num_attention_heads')} attention heads "
                          f"on {len(gpus)} GPU(s)", "numbers": {"gpus": len(gpus)},
                "provable": True, "missing": None}
    tp, budget = tried
    if budget.get("fits_weights") is None or budget.get("kv_gib") is None:
        missing = "; ".join(budget.get("notes") or []) or "the memory budget is incomplete"
        if budget.get("weights_gib") is None:
            missing = f"the weights' size is unknown ({missing})"
        return {"reason": f"cannot size: {missing}", "numbers": {"gpus": len(gpus)},
                "provable": False, "missing": missing}
    numbers = {"gpus": len(gpus), "gpu": ctx["gpu"].get("name"),
               "gpu_memory_gib": budget.get("gpu_memory_gib"), "tensor_parallel_size": tp,
               "gpu_memory_utilization": budget.get("gpu_memory_utilization"),
               "budget_gib": budget.get("budget_gib"),
               "weights_gib_per_gpu": budget.get("weights_gib"),
               "weights_source": budget.get("weights_source"),
               "kv_gib_left": budget.get("kv_gib"),
               "longest_request_tokens": budget.get("single_request_max_tokens")}
    reason = (f"{ctx['model'].get('id')} does not fit on {len(gpus)} x {numbers['gpu']}: at "
              f"TP={tp} {'; '.join(budget.get('arithmetic') or budget.get('notes') or [])}")
    # An estimated size (parameters x bytes) proves a misfit only with a wide margin.
    estimated = str(budget.get("weights_source") or "estimate").startswith("estimate")
    provable = not estimated or (budget.get("fits_weights") is False and
                                 (budget.get("weights_gib") or 0) >=
                                 ESTIMATE_MARGIN * (budget.get("budget_gib") or 0))
    return {"reason": reason, "numbers": numbers, "provable": provable,
            "missing": None if provable else
            f"the weights' size is an estimate ({budget.get('weights_source')})"}
