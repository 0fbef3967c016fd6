"""A failed start that left no memory for the KV cache, explained from the memory budget.

vLLM may use ``gpu_memory_utilization`` x the GPU's memory, everything included. At start-up
it loads the weights, runs one profiling forward pass over the largest batch it schedules
(``max_num_batched_tokens`` tokens, up to ``max_num_seqs`` sequences) and gives the KV cache
what is left of that budget after the weights, the pass's activation peak and the memory
held outside PyTorch (CUDA context, NCCL, CUDA graphs, other processes on the GPU). When
nothing is left the start fails; what vLLM says about it:

* ``ValueError: No available memory for the cache blocks. Try increasing
  `gpu_memory_utilization` when initializing the engine.`` (V0 ``raise_if_cache_size_invalid``
  and V1 ``check_enough_kv_cache_memory``, both guarded by ``<= 0``: the raise-site tables of
  0.8.5 through 0.33.0 in ``audit/kb/data/vllm/raise_sites``);
* the V1 worker's INFO line ``Available KV cache memory: -2.14 GiB``
  (``vllm/v1/worker/gpu_worker.py``), often the last line before "EngineCore failed to
  start" when only the engine core's lines are quoted;
* the V0 worker's profiling summary ``model weights take X GiB; non_torch_memory takes Y
  GiB; PyTorch activation peak memory takes Z GiB; the rest of the memory reserved for KV
  Cache is -W GiB`` (``vllm/worker/worker.py``, 0.6-0.10), preceded by ``total_gpu_memory
  (T GiB) x gpu_memory_utilization (U)``;
* the V1 model runner's ``Model loading took X GiB``: the weights on each GPU.

What helps follows from which part does not fit (vLLM's docs, "Conserving memory"): weights
above the budget need a higher fraction, more tensor parallelism or a smaller
quantization; weights that fit leave the profiling peak to blame, which a higher fraction
(up to the CUDA-graph headroom), a smaller ``--max-num-batched-tokens`` / ``--max-num-seqs``
or more tensor parallelism lowers. A negative figure in the log is the shortfall itself, so
the fraction to raise it to is read from it, not guessed.

:func:`memory_budget` returns the :class:`audit.kb.failed_start_explain.Explanation` fields
to set (``summary_prefix`` and ``error_line`` are joined into the summary there), or None.
"""

from __future__ import annotations

import math
import re
from typing import Any

from audit.kb.memory import RUNTIME_GIB

_GIB = 2**30
_NUM = r"(-?\d+(?:\.\d+)?)"
_NO_BLOCKS = re.compile(r"No available memory for the cache blocks", re.I)
#: What vLLM logged as left for the KV cache (V1 worker; V0 worker's profiling summary).
_KV_LEFT = re.compile(r"(?:Available KV cache memory:|memory reserved for KV Cache is)\s*"
                      + _NUM + r"\s*GiB", re.I)
#: The weights on one GPU (V1 model runner; older V0 "Loading model weights took X GB";
#: V0 profiling summary).
_WEIGHTS = re.compile(r"(?:Model loading took|Loading model weights took|model weights take)"
                      r"\s*" + _NUM + r"\s*Gi?B", re.I)
_ACTIVATION = re.compile(r"activation peak memory takes\s*" + _NUM + r"\s*GiB", re.I)
_NON_TORCH = re.compile(r"non_torch_memory takes\s*" + _NUM + r"\s*GiB", re.I)
_UTIL = re.compile(r"gpu_memory_utilization \(" + _NUM + r"\)", re.I)
_TOTAL = re.compile(r"total_gpu_memory \(" + _NUM + r"\s*GiB\)", re.I)
#: CUDA context, NCCL and a first block of cache: what must fit beside the weights (the
#: memory block's runtime allowance, :data:`audit.kb.memory.RUNTIME_GIB`, plus one GiB).
_BESIDE_WEIGHTS_GIB = RUNTIME_GIB + 1.0
#: A first KV cache beyond the shortfall the log shows.
_FIRST_KV_GIB = 1.0
#: Above this fraction vLLM leaves the GPU no room for CUDA graphs and fragmentation: where
#: the rule ``up-gpu-mem-util-no-cudagraph-headroom`` (audit/rules) starts to fire.
_MAX_UTIL = 0.95
#: The fraction a tensor-parallel size is proposed at: vLLM's default
#: ``--gpu-memory-utilization`` through 0.19.x (0.92 from 0.20.0, audit/kb/data/vllm flag
#: tables), the lower of the two, so the proposal also holds on the older releases.
_PROPOSE_AT_UTIL = 0.9
#: The tensor-parallel sizes proposed, smallest first: the power-of-two sizes up to one
#: 8-GPU node that the recommendation's TP repair also tries (advice/recommend/repairs.py
#: ``_tp``); vLLM's TP must divide the attention heads, which powers of two do for the
#: head counts of most checkpoints.
_TP_STEPS = (2, 4, 8)
_CHECKED = ("vLLM gives the KV cache what is left of gpu_memory_utilization x the GPU's "
            "memory after the weights, the profiling run's activation peak and the memory "
            "outside PyTorch, and refuses to start with none left (check_enough_kv_cache_memory "
            "raises when it is <= 0)")
_PEAK = ("lower the profiling run's activation peak with a smaller --max-num-batched-tokens "
         "or --max-num-seqs")


def _last(pattern: re.Pattern, lines: list[str]) -> tuple[str, float] | None:
    for line in reversed(lines):
        found = pattern.search(line)
        if found:
            return line, float(found[1])
    return None


def _up(fraction: float) -> float:
    """A --gpu-memory-utilization rounded up to the hundredth, so that it covers the need."""
    return math.ceil(fraction * 100) / 100


def _sizes(facts: dict[str, Any]) -> tuple[int, int]:
    """(TP, PP) of the facts, each at least 1."""
    return max(1, facts.get("tp") or 1), max(1, facts.get("pp") or 1)


def _strip(line: str) -> str:
    """A log line without its process/level/time prefix, for quoting."""
    found = _KV_LEFT.search(line) or _NO_BLOCKS.search(line)
    return line[found.start():].strip() if found else line.strip()


def memory_budget(lines: list[str], facts: dict[str, Any],
                  util_default: float | None) -> dict[str, Any] | None:
    """The memory explanation of a start with no KV cache left (module docstring)."""
    left = _last(_KV_LEFT, lines)
    left = left if left and left[1] <= 0 else None
    blocks = next((x for x in reversed(lines) if _NO_BLOCKS.search(x)), None)
    if blocks is None and left is None:
        return None
    line = blocks or left[0]
    short = -left[1] if left else None
    logged_util, logged_total = _last(_UTIL, lines), _last(_TOTAL, lines)
    memory = facts.get("gpu_memory_bytes")
    mem_gib = memory / _GIB if memory else (logged_total[1] if logged_total else None)
    util = facts.get("gpu_memory_utilization")
    set_by_operator = util is not None
    if util is None:
        util = logged_util[1] if logged_util else util_default
    tp, pp = _sizes(facts)
    loaded = _last(_WEIGHTS, lines)
    weights = facts.get("weights_bytes")
    if loaded:
        w_gib, source = loaded[1], "as vLLM logged them"
    elif weights:
        w_gib, source = weights / (tp * pp) / _GIB, facts.get("weights_source") or "weights"
    else:
        w_gib, source = None, None
    now = f" (now {util})" if set_by_operator else ""
    seen = f"vLLM logged \"{_strip(left[0])}\"" if left else None
    # the memory check's own words say what was checked; a log line alone needs it said
    checked = {} if blocks else {"checked": _CHECKED}
    if not mem_gib or w_gib is None:
        change = ("raise --gpu-memory-utilization" + now + ": it caps all of vLLM's GPU "
                  "memory, weights included, and the KV cache gets only what is left; or put "
                  "fewer weights on each GPU (more --tensor-parallel-size, a smaller "
                  "quantization)" + (f", or {_PEAK}" if left else ""))
        out = dict(setting="--gpu-memory-utilization", change=change,
                   value=util if set_by_operator else None, **checked)
        if left:
            out.update(summary_prefix=(
                f"the weights, the profiling run's activation peak and the memory outside "
                f"PyTorch exceed the memory vLLM may use by {short:.2f} GiB on each GPU "
                f"({seen})"), error_line=line)
        return out
    budget = f"{util} x {mem_gib:.1f} GiB = {util * mem_gib:.1f} GiB" if util else None
    over = util is not None and util * mem_gib < w_gib + _BESIDE_WEIGHTS_GIB
    if over or util is None:
        summary, change = _weights_over(w_gib, source, budget, over, mem_gib, util, now,
                                        weights, facts)
    else:
        summary, change = _peak_over(w_gib, source, budget, short, mem_gib, util, now,
                                     lines, facts)
    if seen:
        summary += f"; {seen}"
    return dict(**checked, setting="--gpu-memory-utilization",
                value=util if set_by_operator else None, change=change,
                summary_prefix=summary, error_line=line)


def _weights_over(w_gib: float, source: str, budget: str | None, over: bool, mem_gib: float,
                  util: float | None, now: str, weights: int | None,
                  facts: dict[str, Any]) -> tuple[str, str]:
    """The weights alone (with the runtime) do not fit the budget."""
    need = _up((w_gib + _BESIDE_WEIGHTS_GIB) / mem_gib)
    summary = (f"the weights ({w_gib:.1f} GiB per GPU; {source}) "
               + (f"leave no room in the memory vLLM may use ({budget})" if over else
                  f"and the memory vLLM may use ({budget or 'unknown'}) leave no KV cache"))
    if need <= _MAX_UTIL:
        return summary, (f"raise --gpu-memory-utilization to at least {need:.2f} "
                         f"({need * mem_gib:.1f} GiB of {mem_gib:.1f} GiB: the weights plus "
                         f"{_BESIDE_WEIGHTS_GIB:g} GiB for the runtime and a first KV cache)"
                         + (f", now {util}" if now else "")
                         + "; or lower the weights per GPU (more --tensor-parallel-size, a "
                         "smaller quantization)")
    tp, pp = _sizes(facts)
    total = weights / _GIB if weights else w_gib * tp * pp
    more = next((n for n in _TP_STEPS if n > tp and
                 (total / n / pp + _BESIDE_WEIGHTS_GIB) / mem_gib <= _PROPOSE_AT_UTIL), None)
    return summary, ("the weights do not fit one GPU at any --gpu-memory-utilization: "
                     + (f"use --tensor-parallel-size {more}" if more else
                        "use more GPUs (tensor parallelism)")
                     + ", a smaller quantization, or a larger GPU")


def _peak_over(w_gib: float, source: str, budget: str, short: float | None, mem_gib: float,
               util: float, now: str, lines: list[str],
               facts: dict[str, Any]) -> tuple[str, str]:
    """The weights fit the budget; the profiling run's peak and the memory outside PyTorch
    took the rest."""
    activation, non_torch = _last(_ACTIVATION, lines), _last(_NON_TORCH, lines)
    parts = ", ".join(f"{name} {found[1]:.2f} GiB" for name, found in
                      (("activation peak", activation), ("outside PyTorch", non_torch))
                      if found)
    summary = (f"the weights ({w_gib:.1f} GiB per GPU; {source}) fit the memory vLLM may use "
               f"({budget}), but the profiling run's activation peak and the memory outside "
               "PyTorch (CUDA graphs, NCCL, other processes on the GPU) took the rest"
               + (f" ({parts})" if parts else "")
               + (f": {short:.2f} GiB short on each GPU" if short else ""))
    ways = []
    if short is not None:
        need = _up((util * mem_gib + short + _FIRST_KV_GIB) / mem_gib)
        if need <= _MAX_UTIL:
            ways.append(f"raise --gpu-memory-utilization to at least {need:.2f}{now} "
                        f"({short:.2f} GiB short plus {_FIRST_KV_GIB:g} GiB for a first KV "
                        "cache)")
        else:
            gain = (_MAX_UTIL - util) * mem_gib
            ways.append(f"raise --gpu-memory-utilization to {_MAX_UTIL}{now}: {gain:.2f} GiB "
                        + (f"more covers the {short:.2f} GiB missing but leaves little KV "
                           "cache, so combine it with one of the following" if gain >= short
                           else f"more, short of the {short:.2f} GiB missing"))
    else:
        ways.append(f"raise --gpu-memory-utilization{now}, up to {_MAX_UTIL}")
    ways.append(_PEAK)
    if w_gib < 0.5 * util * mem_gib:
        # small weights: spreading them frees little; the peak or the fraction is the cause
        return summary, "; ".join(ways) + "; then keep --max-model-len within the KV cache left"
    tp, _pp = _sizes(facts)
    want = (short or 0.0) + _FIRST_KV_GIB
    more = next((n for n in _TP_STEPS if n > tp and w_gib * (1 - tp / n) >= want), None)
    count = facts.get("gpu_count")
    spread = (f"--tensor-parallel-size {more}" if more else "more --tensor-parallel-size")
    if more and count and count < more:
        spread += f" (this host reports {count} GPU{'s' if count > 1 else ''})"
    ways.append(f"split the weights over more GPUs ({spread}) or serve a smaller "
                "quantization")
    return summary, "; ".join(ways) + "; then keep --max-model-len within the KV cache left"
