"""Live invariants: what a server's metrics must obey, judged over a window of scrapes.

``metrics.invariants`` of a rule context (docs/knowledge-base.md, "Live invariants", states
each one with its arithmetic). Every invariant names the metrics it reads; a metric the
server's release does not define (its table, ``audit/kb/data/vllm/<release>.json``) leaves
the invariant unjudged with that reason, never "fine". Gauges (waiting, running, KV usage)
count only when they agree at BOTH ends of a delta window (the previous scrape's values are
``metrics.start``): one scrape can catch a queue mid-admission. Counters and histograms are
the window's increase.

One diagnosis per window (``diagnosis``) and one direction per flag (``steer``): the queue is
KV pressure, a full batch, or an admission stall, never two at once, so the live findings
built on it cannot tell an operator to raise and to lower ``--max-num-seqs`` together.
"""

from __future__ import annotations

import math
from typing import Any

from audit.kb.vllm_tables import table

#: KV usage (0..1, ``vllm:kv_cache_usage_perc``) below which the pool has room for more
#: sequences; at or above KV_FULL the scheduler preempts (V1 preempts when a step cannot
#: allocate a block, i.e. at ~100 %; 0.95 leaves one block per ~20 for fragmentation).
KV_ROOM = 0.90
KV_FULL = 0.95
#: Queue time / TTFT (means over the window's requests) at which waiting, not prefill, is
#: most of the first-token latency.
QUEUE_SHARE = 0.5
#: Fewest first tokens in the window before TTFT shares are judged.
MIN_TIMED = 10
#: A prefix cache hit rate below this over the window is "cold".
COLD_HIT_RATE = 0.02
#: Default KV block (tokens) of vLLM V1 on CUDA (``CacheConfig.block_size`` default 16).
DEFAULT_BLOCK = 16
#: Methods whose drafter is not a neural network (string matching): no GPU cost per token.
FREE_DRAFTERS = frozenset({"ngram", "suffix", "ngram_gpu"})
#: Methods that run one extra decoder layer of the target's width per draft token.
LAYER_DRAFTERS = frozenset({"eagle", "eagle3", "mtp", "medusa", "dflash", "dspark"})

# Metrics each invariant reads (any spelling of a group will do), as vLLM names them.
_NEEDS: dict[str, list[tuple[str, ...]]] = {
    "queue": [("vllm:num_requests_waiting",), ("vllm:num_requests_running",),
              ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")],
    "over_admission": [("vllm:num_preemptions",), ("vllm:request_prompt_tokens",),
                       ("vllm:request_generation_tokens",),
                       ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")],
    "queue_ttft": [("vllm:request_queue_time_seconds", "vllm:time_in_queue_requests"),
                   ("vllm:time_to_first_token_seconds",)],
    "spec_tokens": [("vllm:spec_decode_num_accepted_tokens_per_pos",),
                    ("vllm:spec_decode_num_drafts",)],
    "prefix_block": [("vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries"),
                     ("vllm:request_prompt_tokens",)],
}


def _undefined(release: str | None, name: str) -> str | None:
    """Why ``name``'s invariant cannot be judged on ``release`` (a metric it does not
    define), else None."""
    if release is None:
        return None
    try:
        defined = table(release)["metrics"]
    except FileNotFoundError:
        return None
    for group in _NEEDS[name]:
        if not any(metric in defined for metric in group):
            return f"{group[0]} is not defined by vLLM {release}"
    return None


def _both(start: dict | None, cur: dict, key: str, test) -> bool:
    """``test`` holds at both ends of the window (False without a start)."""
    if start is None:
        return False
    a, b = start.get(key), cur.get(key)
    return isinstance(a, (int, float)) and isinstance(b, (int, float)) and test(a) and test(b)


def _either(start: dict | None, cur: dict, key: str, test) -> bool:
    values = [cur.get(key)] + ([start.get(key)] if start else [])
    return any(isinstance(v, (int, float)) and test(v) for v in values)


def _result(name: str, release: str | None, **values: Any) -> dict[str, Any]:
    why = _undefined(release, name)
    if why:
        return {"judged": False, "holds": None, "why": why, "steer": None}
    return {"judged": True, "holds": False, "why": "", "steer": None, **values}


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def kv_capacity(metrics: dict, memory: dict) -> int | None:
    """KV pool in tokens: the engine's ``cache_config_info`` (``kv_cache_size_tokens``, else
    blocks x block size), else the memory estimate."""
    for value in (metrics.get("kv_capacity_tokens"), memory.get("engine_kv_tokens"),
                  memory.get("kv_capacity_tokens")):
        if isinstance(value, (int, float)) and value > 0:
            return int(value)
    return None


def block_tokens(metrics: dict, flags: dict, memory: dict, model: dict) -> tuple[int, str]:
    """(tokens per KV block, where from). Hybrid models: the attention block that vLLM
    enlarges until its page holds one sequence's linear/Mamba state, computed from the model
    config (``audit.kb.memory``); else ``cache_config_info`` ``effective_attention_block_size``
    (0.32+) or ``block_size``, the flag, or vLLM's default 16."""
    hybrid = memory.get("hybrid_block_tokens")
    if (model.get("arch") or {}).get("is_hybrid") and isinstance(hybrid, int):
        return hybrid, "hybrid attention block from the model config"
    labels = metrics.get("cache_config") or {}
    # effective_attention_block_size (0.32 cache_config_info) is the block the cache hashes;
    # block_size is the minimum over KV groups on hybrid models (vLLM issue #51163).
    for name in ("effective_attention_block_size", "block_size"):
        try:
            if labels.get(name) not in (None, "None", ""):
                return int(float(labels[name])), f"cache_config_info {name}"
        except ValueError:
            continue
    if _int(flags.get("block_size")):
        return flags["block_size"], "--block-size"
    return DEFAULT_BLOCK, "vLLM default"


def _seq_tokens(m: dict, block: int) -> int | None:
    """Peak KV footprint of a mean request: prompt + generation means (the window's, else
    the process lifetime's when no request finished in the window), whole blocks."""
    prompt, gen = m.get("prompt_len_mean"), m.get("generation_len_mean")
    if prompt is None or gen is None:
        life = m.get("lifetime") or {}
        prompt, gen = life.get("prompt_len_mean"), life.get("generation_len_mean")
    if prompt is None or gen is None or prompt + gen <= 0:
        return None
    return math.ceil((prompt + gen) / block) * block


def _queue(m: dict, start: dict | None, flags: dict, cap: int | None, block: int,
           release: str | None) -> dict[str, Any]:
    """Admission stall / full batch / KV pressure: the one diagnosis of a persistent queue."""
    out = _result("queue", release, diagnosis=None, persists=False, fits=None)
    if not out["judged"]:
        return out
    max_seqs = _int(flags.get("max_num_seqs"))
    if start is None:
        out.update(judged=False, holds=None,
                   why="one scrape: a queue is judged over a window of two scrapes")
        return out
    out["persists"] = _both(start, m, "requests_waiting", lambda v: v > 0)
    if not out["persists"]:
        out["why"] = "no request waited at both ends of the window"
        return out
    preempted = (m.get("preemptions") or 0) > 0
    seq = _seq_tokens(m, block)
    out["fits"] = cap // seq if cap and seq else None
    if _either(start, m, "kv_cache_usage", lambda v: v >= KV_FULL) or preempted:
        out["diagnosis"] = "kv_pressure"
        out["why"] = (f"KV usage {_pct(m.get('kv_cache_usage'))} with {m.get('preemptions')} "
                      f"preemptions in the window: the pool, not the batch limit, is full")
    elif max_seqs and _both(start, m, "kv_cache_usage", lambda v: v < KV_ROOM) \
            and _both(start, m, "requests_running", lambda v: v >= max_seqs):
        out["diagnosis"] = "batch_full"
        ceiling = out["fits"] if out["fits"] else 2 * max_seqs
        value = min(ceiling, 2 * max_seqs)
        out["why"] = (f"running = max_num_seqs {max_seqs} at both ends with KV usage "
                      f"{_pct(start.get('kv_cache_usage'))} -> {_pct(m.get('kv_cache_usage'))}: "
                      f"the batch limit holds the queue while the KV pool has room "
                      + (f"({out['fits']} sequences of the mean length fit)" if out["fits"]
                         else "(no request has finished yet to size the pool by)"))
        if value > max_seqs:
            out["steer"] = {"flag": "--max-num-seqs", "direction": "raise", "value": value}
    elif _both(start, m, "kv_cache_usage", lambda v: v < KV_ROOM) and (
            max_seqs is None or _both(start, m, "requests_running", lambda v: v < max_seqs)):
        out["diagnosis"] = "admission_stall"
        out["why"] = (f"{_n(start.get('requests_waiting'))} -> {_n(m.get('requests_waiting'))} "
                      f"waiting while {_n(start.get('requests_running'))} -> "
                      f"{_n(m.get('requests_running'))} "
                      f"run (max_num_seqs {max_seqs}) and KV usage is "
                      f"{_pct(m.get('kv_cache_usage'))}: neither the pool nor the batch limit "
                      f"is full, the scheduler is not admitting")
        batched, prompt = _int(flags.get("max_num_batched_tokens")), m.get("prompt_len_mean")
        if batched and prompt and prompt >= batched / 2:
            out["steer"] = {"flag": "--max-num-batched-tokens", "direction": "raise",
                            "value": int(2 ** math.ceil(math.log2(prompt * 2)))}
    else:
        out["why"] = "the ends of the window disagree (KV or running changed side)"
    out["holds"] = out["diagnosis"] is not None
    return out


def _over_admission(m: dict, start: dict | None, flags: dict, cap: int | None, block: int,
                    release: str | None) -> dict[str, Any]:
    """Preemptions (each one a full KV pool): max_num_seqs that fits = KV tokens / mean
    sequence."""
    out = _result("over_admission", release, fits=None, seq_tokens=None)
    if not out["judged"]:
        return out
    # V1 preempts only when a step cannot allocate a block, i.e. at a full pool: a
    # preemption in the window is the pool at ~100 % (the gauge rarely catches the instant).
    if not (m.get("preemptions") or 0) > 0:
        out["why"] = "no preemption in the window"
        return out
    seq = out["seq_tokens"] = _seq_tokens(m, block)
    max_seqs = _int(flags.get("max_num_seqs"))
    if not cap or not seq:
        out.update(judged=False, holds=None,
                   why="KV capacity or the mean request length is unknown")
        return out
    out["fits"] = fits = max(1, cap // seq)
    out["holds"] = bool(max_seqs and fits < max_seqs)
    out["why"] = (f"{m.get('preemptions')} preemptions in the window (each at a full KV pool): "
                  f"{cap} KV tokens / {seq} tokens per mean request (prompt + generation, "
                  f"whole {block}-token blocks) = {fits} sequences fit; max_num_seqs "
                  f"{max_seqs}")
    if out["holds"]:
        out["steer"] = {"flag": "--max-num-seqs", "direction": "lower", "value": fits}
    return out


def _queue_ttft(m: dict, release: str | None) -> dict[str, Any]:
    """Mean queue time / mean TTFT over the window's requests."""
    out = _result("queue_ttft", release, share=None)
    if not out["judged"]:
        return out
    queue, ttft, timed = m.get("queue_mean_s"), m.get("ttft_mean_s"), m.get("requests_timed")
    if queue is None or not ttft or (timed or 0) < MIN_TIMED:
        out.update(judged=False, holds=None,
                   why=f"fewer than {MIN_TIMED} first tokens in the window")
        return out
    out["share"] = share = min(1.0, queue / ttft)
    out["holds"] = share >= QUEUE_SHARE
    out["why"] = (f"mean queue time {queue:.2f} s of mean TTFT {ttft:.2f} s = "
                  f"{share:.0%} over {timed} requests")
    return out


def drafter_cost(model: dict) -> tuple[float | None, str]:
    """(cost of one draft token relative to one target decode step, how derived)."""
    spec = model.get("speculative") or {}
    method = spec.get("method")
    if method in FREE_DRAFTERS:
        return 0.0, f"{method}: string matching, no model"
    files = model.get("files") or {}
    target, draft = files.get("weights_bytes"), files.get("speculator_weights_bytes")
    if method == "draft_model" and target and draft:
        return draft / target, "draft weights / target weights (decode reads every weight)"
    layers = (model.get("arch") or {}).get("layers")
    if method in LAYER_DRAFTERS and layers:
        return 1.0 / layers, f"one decoder layer of {layers} (lm_head not counted)"
    return None, "drafter cost unknown"


def _spec_tokens(m: dict, start: dict | None, model: dict, gpu: dict,
                 release: str | None) -> dict[str, Any]:
    """The num_speculative_tokens k that maximises expected tokens per unit of step time."""
    out = _result("spec_tokens", release, best_k=None, expected=None)
    spec = model.get("speculative") or {}
    k = _int(spec.get("num_speculative_tokens"))
    if not out["judged"] or not spec.get("method") or not k:
        if out["judged"]:
            out.update(judged=False, holds=None, why="no speculative decoding")
        return out
    rates = [r for r in (m.get("spec_per_position") or [])[:k] if isinstance(r, (int, float))]
    if len(rates) < k or (m.get("spec_drafts") or 0) <= 0:
        out.update(judged=False, holds=None,
                   why="per-position acceptance not exposed for every position in the window")
        return out
    cost, how = drafter_cost(model)
    knee = gpu.get("bandwidth_knee_server") or gpu.get("bandwidth_knee_max_num_seqs")
    running = [v for v in (m.get("requests_running"), (start or {}).get("requests_running"))
               if isinstance(v, (int, float))]
    if cost is None or not knee or not running:
        out.update(judged=False, holds=None,
                   why=f"{how}; GPU bandwidth knee or running requests unknown")
        return out
    batch = max(1.0, sum(running) / len(running))

    def rate(j: int) -> float:  # tokens per sequence per unit time with j draft tokens
        step = max(1.0, batch * (j + 1) / knee) + j * cost
        return (1.0 + sum(rates[:j])) / step

    per_k = [rate(j) for j in range(k + 1)]
    best = max(range(k + 1), key=lambda j: (round(per_k[j], 6), -j))
    out.update(best_k=best, expected=[round(v, 3) for v in per_k], holds=best < k)
    out["why"] = (f"per-position acceptance {[round(r, 2) for r in rates]}; tokens per step "
                  f"1 + sum(rates[:j]) over step time max(1, {batch:.0f} running x (j+1) / "
                  f"knee {knee}) + j x drafter {cost:.3f} ({how}): best j = {best} of {k}")
    if out["holds"]:
        out["steer"] = {"flag": "--speculative-config", "key": "num_speculative_tokens",
                        "direction": "lower", "value": best}
    return out


def _prefix_block(m: dict, flags: dict, block: int, source: str,
                  release: str | None) -> dict[str, Any]:
    """Prefix caching on, hit rate ~0, the mean prompt shorter than one KV block (a prefix
    is cached only in whole blocks, so a prompt under one block never hits)."""
    out = _result("prefix_block", release, block_tokens=block, block_source=source)
    if not out["judged"]:
        return out
    # The mean (histogram _sum/_count) is exact; a quantile is interpolated inside vLLM's
    # 1-2-5 token buckets (a 119-token prompt reads as p90 190 in the 100-200 bucket).
    rate, mean = m.get("prefix_cache_hit_rate"), m.get("prompt_len_mean")
    if flags.get("enable_prefix_caching") is False or rate is None or mean is None:
        out.update(judged=False, holds=None,
                   why="prefix caching off, or no prefix-cache queries / prompt lengths")
        return out
    out["holds"] = rate < COLD_HIT_RATE and mean < block
    out["why"] = (f"hit rate {rate:.1%}; the mean prompt is {mean:.0f} tokens, one KV block "
                  f"is {block} tokens ({source})")
    return out


def _n(value: Any) -> Any:
    """A gauge for a message: 4.0 reads "4"."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _pct(value: Any) -> str:
    if not isinstance(value, (int, float)):
        return "unknown"
    return f"{value:.2%}" if 0 < value < 0.01 else f"{value:.0%}"


def unjudged(why: str) -> dict[str, Any]:
    """``metrics.invariants`` when nothing can be judged (no metrics, no window)."""
    one = {"judged": False, "holds": None, "why": why, "steer": None}
    return {"window": False, **{name: dict(one) for name in _NEEDS}, "diagnosis": None,
            "steer": []}


def with_invariants(metrics: dict[str, Any], flags: dict[str, Any], model: dict[str, Any],
                    memory: dict[str, Any], gpu: dict[str, Any],
                    release: str | None) -> dict[str, Any]:
    """``metrics`` plus ``invariants``: {window (bool: two scrapes), queue, over_admission,
    queue_ttft, spec_tokens, prefix_block (each {judged, holds, why, steer, ...}; the
    names of ``_NEEDS``),
    diagnosis (``kv_pressure`` | ``batch_full`` | ``admission_stall`` | None), steer (the
    one steer per flag, list)}."""
    start = metrics.get("start")
    cap = kv_capacity(metrics, memory or {})
    block, source = block_tokens(metrics, flags, memory or {}, model)
    inv: dict[str, Any] = {"window": start is not None}
    if not metrics.get("available"):
        return {**metrics, "invariants": unjudged("no /metrics")}
    inv["queue"] = _queue(metrics, start, flags, cap, block, release)
    inv["over_admission"] = _over_admission(metrics, start, flags, cap, block, release)
    inv["queue_ttft"] = _queue_ttft(metrics, release)
    inv["spec_tokens"] = _spec_tokens(metrics, start, model, gpu or {}, release)
    inv["prefix_block"] = _prefix_block(metrics, flags, block, source, release)
    inv["diagnosis"] = inv["queue"].get("diagnosis")
    steers: dict[str, dict] = {}
    # Over-admission speaks for --max-num-seqs under KV pressure; the queue otherwise.
    for name in ("over_admission", "queue", "spec_tokens"):
        steer = inv[name].get("steer")
        if steer and steer["flag"] not in steers:
            steers[steer["flag"]] = steer
    inv["steer"] = list(steers.values())
    return {**metrics, "invariants": inv}
