"""Roofline step time of one vLLM engine step, and the closed-loop operating point around it.

:func:`roofline_step` is the time of one scheduler step (seconds) on one TP x PP group:
``max(bytes / HBM bandwidth, FLOPs / tensor-core peak)``, where

- bytes = the weights a step touches (all of them for a dense model; for an MoE the expected
  share ``1 - (1 - active/total) ** tokens``, tokens routed independently) + the drafter's
  weights once per drafted token + every running request's KV (global layers over the whole
  context, sliding layers over the window);
- FLOPs = 2 x active parameters per token (one multiply-add per weight: Kaplan et al. 2020,
  "Scaling Laws for Neural Language Models", C_forward = 2N) + attention, 4 x heads x head_dim
  per attended position per layer (QK^T and AV);
- bandwidth and peaks are datasheet figures (audit/kb/data/gpus.yaml bandwidth_tbs;
  audit/kb/perf/compute.yaml peak_tflops), no efficiency factor: the fleet calibration
  (audit.kb.perf.calibrate) is what turns peak into achieved.

:func:`operating_point` puts a step model in a closed loop of ``concurrency`` clients
(each sends its next request when the last one ends, as ``vllm bench serve --max-concurrency``
does): running = min(concurrency per replica, max_num_seqs, requests the KV memory holds);
each step decodes every running request by (k + 1) tokens and prefills the share of new
prompts that keeps the batch full (chunked prefill, capped at max_num_batched_tokens); the
rest of the clients queue (Little's law). TP communication is the one measured overhead the
seed gives, :data:`TP_OVERHEAD` per TP doubling; CUDA-graph padding is not modelled.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from audit.kb.perf.facts import CommandFacts, Load, default_acceptance

#: Step-time overhead of tensor parallelism per doubling of TP: "per-H100 TP=2 has ~9% TP
#: communication overhead" (seed 000, Decision guide: 745 tok/s at TP=2 vs 2 x 408 at TP=1,
#: H100 SXM5 NVLink). Measured on that interconnect only; applied to every GPU as is.
TP_OVERHEAD = 0.09
TP_OVERHEAD_SOURCE = "seed:000_ffb301503ad246f2.txt#Decision guide — which TP for which workload"

StepFn = Callable[[CommandFacts, float, int, float, float], float]


def _attention_flops(f: CommandFacts, tokens: float, attended: float) -> float:
    """FLOPs of attention for ``tokens`` query tokens over ``attended`` positions each."""
    heads = f.heads or 0
    full = 4 * heads * (f.global_head_dim or f.head_dim or 0) * attended * f.global_layers
    window = min(attended, f.window) if f.window else attended
    sliding = 4 * heads * (f.head_dim or 0) * window * f.sliding_layers
    return tokens * (full + sliding)


def roofline_step(f: CommandFacts, running: float, tokens_per_seq: int, context: float,
                  prefill_tokens: float) -> float:
    """Seconds of one engine step on one replica (see the module docstring)."""
    shards = f.shards
    tokens = running * tokens_per_seq + prefill_tokens
    total, active = f.params_b or 0.0, f.active_params_b or f.params_b or 0.0
    share = 1.0 if active >= total else 1.0 - (1.0 - active / total) ** max(1.0, tokens)
    weights = (f.weight_bytes_total or 0.0) * share / shards
    drafter = f.drafter_bytes_total * f.spec_k / shards
    kv = running * f.request_kv_bytes(context)
    seconds_memory = (weights + drafter + kv) / (f.bandwidth_tbs * 1e12)
    flops = (2 * active * 1e9 * tokens
             + _attention_flops(f, running * tokens_per_seq, context)
             + _attention_flops(f, prefill_tokens, context / 2)) / shards
    seconds_compute = flops / (f.peak_tflops * 1e12) if f.peak_tflops else 0.0
    return max(seconds_memory, seconds_compute) * (1 + TP_OVERHEAD * math.log2(max(1, f.tp)))


def kv_request_capacity(f: CommandFacts, load: Load) -> float:
    """Requests of ``prompt + output`` tokens the KV memory of one replica holds."""
    need = f.request_kv_bytes(load.prompt_tokens + load.output_tokens)
    return (f.kv_memory_bytes or 0.0) / need if need else math.inf


def operating_point(f: CommandFacts, load: Load, step: StepFn = roofline_step,
                    acceptance: float | None = None) -> dict[str, Any]:
    """Predicted figures at ``load`` for the whole layout (all replicas).

    Returns ``{"tpot_s", "ttft_s", "output_tps", "running", "limited_by", "acceptance_length",
    "acceptance_source"}``; ``output_tps`` sums the replicas, latencies are per request.
    Raises ValueError when one request does not fit the KV memory.
    """
    alpha, alpha_src = (acceptance, "measured by this server") if acceptance else \
        default_acceptance(f.spec_method) if f.spec_k else (1.0, "no speculative decoding")
    alpha = min(max(1.0, alpha), f.spec_k + 1.0)
    per_replica = max(1.0, load.concurrency / f.replicas)
    capacity = kv_request_capacity(f, load)
    if capacity < 1:
        raise ValueError("one request of the observed length does not fit the KV memory")
    limits = {"concurrency": per_replica, "max_num_seqs": float(f.max_num_seqs),
              "KV memory": math.floor(capacity)}
    limited_by = min(limits, key=limits.get)
    running = limits[limited_by]
    tokens_per_seq = f.spec_k + 1
    context = load.prompt_tokens + load.output_tokens / 2
    decode_steps = load.output_tokens / alpha
    budget = max(1.0, f.max_num_batched_tokens - running * tokens_per_seq)
    prefill = min(budget, running * load.prompt_tokens / decode_steps)
    seconds = step(f, running, tokens_per_seq, context, prefill)
    prefill_steps = math.ceil(load.prompt_tokens / budget)
    in_service = (prefill_steps + decode_steps) * seconds
    queue = max(0.0, per_replica - running) * in_service / running
    busy = min(float(f.replicas), load.concurrency / per_replica)  # fewer clients than replicas
    return {"tpot_s": seconds / alpha, "ttft_s": queue + prefill_steps * seconds,
            "output_tps": running * alpha / seconds * busy, "running": running,
            "limited_by": limited_by, "acceptance_length": round(alpha, 2),
            "acceptance_source": alpha_src}
