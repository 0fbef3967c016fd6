"""What the performance model needs to know about one command, read from a rule context.

:func:`command_facts` turns a context of :func:`audit.kb.context.build_context` (the running
server's, or the recommended plan's as-if context) into a :class:`CommandFacts`;
:func:`observed_load` reads the server's own load and latencies from the same context's
``metrics`` block (audit.kb.metrics_window). Nothing here guesses: a fact the context lacks
stays None and the model says which one stopped it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from audit.kb.catalogue import params_from_name
from audit.kb.geometry import request_bytes
from audit.kb.paths import safe_load_yaml

_GIB = 2**30
#: Compute precision of the matrix multiplies by weight quantisation: weight-only 4-bit
#: schemes (AWQ/GPTQ/W4A16) dequantise into BF16 tensor-core math (vLLM's Marlin kernels);
#: FP8 checkpoints run FP8 GEMMs where the GPU has them; NVFP4 runs FP4 on Blackwell.
_COMPUTE_DTYPE = {"fp8": "fp8", "nvfp4": "fp4", "mxfp4": "fp4"}


@cache
def _compute_table() -> dict[str, Any]:
    return safe_load_yaml((Path(__file__).with_name("compute.yaml")).read_text("utf-8"))


def peak_tflops(label: str | None, dtype: str) -> tuple[float | None, str | None]:
    """(dense tensor-core TFLOPS, source) for a gpus.yaml label at ``dtype`` ("bf16" | "fp8" |
    "fp4"); falls back to the next wider precision the GPU has; (None, None) when unknown."""
    row = _compute_table()["peak_tflops"].get(label or "")
    if not row:
        return None, None
    for key in {"fp4": ("fp4", "fp8", "bf16"), "fp8": ("fp8", "bf16")}.get(dtype, ("bf16",)):
        if row.get(key):
            return float(row[key]), f"{key}: {row['source']}"
    return None, None


def default_acceptance(method: str | None) -> tuple[float, str]:
    """(mean acceptance length, source) for a speculator with no counters of its own."""
    row = _compute_table()["acceptance_length"].get((method or "").lower())
    if row:
        return float(row["value"]), row["source"]
    return 1.0, "no measured acceptance for this method: drafting assumed to gain nothing"


@dataclass(frozen=True)
class CommandFacts:
    """One command on one GPU type. Bytes are per GPU at this TP x PP unless named total."""

    model: str | None
    gpu_label: str | None
    bandwidth_tbs: float | None
    peak_tflops: float | None
    peak_source: str | None
    compute_dtype: str
    replicas: int
    tp: int
    pp: int
    max_num_seqs: int
    max_num_batched_tokens: int
    quantization: str | None
    kv_cache_dtype: str | None
    weight_bytes_total: float | None
    drafter_bytes_total: float
    params_b: float | None
    active_params_b: float | None
    kv_global_bytes: float | None
    kv_sliding_bytes: float
    window: int | None
    kv_memory_bytes: float | None
    heads: int | None
    global_head_dim: int | None
    head_dim: int | None
    global_layers: int
    sliding_layers: int
    spec_method: str | None
    spec_k: int
    version: str | None
    block_size: int

    @property
    def shards(self) -> int:
        return max(1, self.tp) * max(1, self.pp)

    def missing(self) -> list[str]:
        """Facts the roofline cannot do without (empty when it can run)."""
        need = {"GPU memory bandwidth": self.bandwidth_tbs,
                "weight size for this quantization": self.weight_bytes_total,
                "parameter count": self.params_b,
                "KV bytes per token (model geometry)": self.kv_global_bytes,
                "KV memory per GPU": self.kv_memory_bytes}
        return [name for name, value in need.items() if not value]

    def request_kv_bytes(self, tokens: float) -> float:
        """KV bytes per GPU one decoding request of ``tokens`` holds: global layers grow with
        the length, sliding layers keep window + one block once prefill is done
        (audit.kb.geometry.request_bytes with a one-block chunk)."""
        return request_bytes(int(max(1, tokens)), self.kv_global_bytes or 0.0,
                             self.kv_sliding_bytes, self.window, self.block_size,
                             self.block_size)


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 \
        else default


def command_facts(ctx: dict[str, Any], replicas: int = 1) -> CommandFacts:
    """Facts of the command a context describes (``replicas`` copies of it on the host)."""
    flags, geo, gpu, model = ctx["flags"], ctx["geometry"], ctx["gpu"], ctx["model"]
    arch = model.get("arch") or {}
    total, active = arch.get("params_b"), arch.get("active_params_b")
    if total is None:
        total, active = params_from_name(*(model.get("hints") or []))
    active = active or total
    quant = model.get("quantization")
    dtype = _COMPUTE_DTYPE.get(quant or "", "bf16")
    peak, peak_src = peak_tflops(gpu.get("label"), dtype)
    memory = ctx.get("memory") or {}
    weights_gib = memory.get("weights_gib") or geo.get("weight_gib")
    kv_gib = memory.get("kv_gib") if memory.get("kv_gib") is not None \
        else geo.get("kv_memory_gib_estimate")
    spec = model.get("speculative") or {}
    counts = arch.get("layer_counts") or {}
    sliding = int(counts.get("sliding") or geo.get("sliding_layers") or 0)
    layers = int(arch.get("layers") or geo.get("layers") or 0)
    return CommandFacts(
        model=flags.get("model"), gpu_label=gpu.get("label"),
        bandwidth_tbs=gpu.get("bandwidth_tbs"), peak_tflops=peak, peak_source=peak_src,
        compute_dtype=dtype, replicas=max(1, replicas),
        tp=_int(flags.get("tensor_parallel_size"), 1),
        pp=_int(flags.get("pipeline_parallel_size"), 1),
        max_num_seqs=_int(flags.get("max_num_seqs"), 256),
        max_num_batched_tokens=_int(flags.get("max_num_batched_tokens"), 2048),
        quantization=quant, kv_cache_dtype=flags.get("kv_cache_dtype"),
        weight_bytes_total=weights_gib * _GIB if weights_gib else None,
        drafter_bytes_total=(memory.get("drafter_gib") or geo.get("drafter_gib") or 0.0) * _GIB,
        params_b=total, active_params_b=active,
        kv_global_bytes=geo.get("kv_bytes_per_token_global"),
        kv_sliding_bytes=geo.get("kv_bytes_per_token_sliding") or 0.0,
        window=geo.get("sliding_window") if geo.get("kv_bytes_per_token_sliding") else None,
        kv_memory_bytes=kv_gib * _GIB if kv_gib and kv_gib > 0 else None,
        heads=arch.get("num_attention_heads") or geo.get("num_attention_heads"),
        global_head_dim=arch.get("global_head_dim") or arch.get("head_dim"),
        head_dim=arch.get("head_dim") or geo.get("head_dim"),
        global_layers=max(0, layers - sliding), sliding_layers=sliding,
        spec_method=spec.get("method") if spec.get("enabled") else None,
        spec_k=_int(spec.get("num_speculative_tokens"), 0) if spec.get("enabled") else 0,
        version=ctx["vllm"].get("version"),
        block_size=_int(flags.get("block_size"), 16),
    )


@dataclass(frozen=True)
class Load:
    """The operating point to predict at: clients in the system, tokens per request."""

    concurrency: float
    prompt_tokens: float
    output_tokens: float
    source: str


@dataclass(frozen=True)
class Measured:
    """What the server itself reported at that load (None where it did not)."""

    tpot_s: float | None
    ttft_s: float | None
    output_tps: float | None
    acceptance_length: float | None


def observed_load(ctx: dict[str, Any]) -> tuple[Load | None, Measured, str | None]:
    """(load, measured figures, why there is no load) from the ``metrics`` block.

    Concurrency = running + waiting requests (the clients in the system); prompt tokens = the
    median of ``vllm:request_prompt_tokens``; output tokens = generated tokens / finished
    requests over the same window, else the median of ``request_generation_tokens`` when
    the window derived it, else None (then the load is refused)."""
    m = ctx.get("metrics") or {}
    measured = Measured(m.get("tpot_p50_s"), m.get("ttft_p50_s"), m.get("generation_tps"),
                        m.get("spec_mean_acceptance_length"))
    running = m.get("requests_running")
    if not m.get("available") or running is None:
        return None, measured, "the server sent no /metrics: no observed load"
    concurrency = float(running) + float(m.get("requests_waiting") or 0)
    if not math.isfinite(concurrency):  # a NaN/Inf gauge is agent input, not a load
        return None, measured, "the running/waiting gauges are not finite numbers"
    if concurrency < 1:
        return None, measured, "the server was idle (no running or waiting request)"
    prompt = m.get("prompt_len_p50")
    finished, generated = m.get("requests_finished"), m.get("generation_tokens")
    output = generated / finished if finished and generated else m.get("output_len_p50")
    if not prompt or not output or not math.isfinite(prompt) or not math.isfinite(output):
        return None, measured, ("the /metrics window gives no prompt and output lengths "
                                "(request_prompt_tokens, generation_tokens / finished)")
    return Load(concurrency, float(prompt), float(output),
                "observed: running + waiting requests; median prompt tokens; generated / "
                "finished requests"), measured, None
