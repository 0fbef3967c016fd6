"""What a report says about the host and model of a failed start, for its explanation.

A failed start's log names the check that failed; whether the cause is the operator's
setting, the host or the model often needs the numbers around it: the GPU's memory and
compute capability, the host's NVIDIA driver and the CUDA version it supports, the model's
weight size and the checkpoint's own quantization method. :func:`facts_of` reads them from
the contract report (``fleet_agent/schema.py``) the failed start came with, so the
dashboard (:mod:`audit.crashloop`) and any tool that holds the same report dict answer
alike. Every value is None when the report does not carry it; nothing is guessed except
the weight size, which falls back to the parameters written in the model's name times the
bytes per parameter of its quantization (the estimate the memory block uses,
:mod:`audit.kb.memory`), and says so in ``weights_source``.
"""

from __future__ import annotations

from typing import Any

from audit.kb.catalogue import params_from_name
from audit.kb.flags import parse_argv
from audit.kb.geometry import detect_quantization, find_model
from audit.kb.modelparams import BYTES_PER_PARAM


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 \
        else None


def _model_files(report: dict[str, Any], model: str | None) -> dict[str, Any] | None:
    """The model files a running server of the same report read for the same model (a
    failed start reports none of its own)."""
    if not model:
        return None
    for server in report.get("servers") or []:
        files = server.get("model_files")
        if not files:
            continue
        values = parse_argv(server.get("argv") or []).values
        if values.get("model") == model:
            return files
    return None


def _gpu_facts(gpus: list[dict[str, Any]]) -> dict[str, Any]:
    present = [g for g in gpus if isinstance(g, dict)]
    memory = [m for m in (_int(g.get("memory_total_bytes")) for g in present) if m]
    ccs = []
    for gpu in present:
        try:
            ccs.append(float(gpu.get("compute_capability")))
        except (TypeError, ValueError):
            continue
    amd = any(g.get("gfx_arch") or g.get("vendor") == "amd" for g in present)
    platform = "rocm" if amd else ("cuda" if ccs or present else None)
    return {"gpu_count": len(present) or None,
            "gpu_memory_bytes": min(memory) if memory else None,
            "gpu_name": next((g.get("name") for g in present if g.get("name")), None),
            "cc": None if amd or not ccs else min(ccs), "platform": platform}


def facts_of(report: dict[str, Any], entry: dict[str, Any]) -> dict[str, Any]:
    """The facts of one failed start (``entry``: a ``failed_starts[]`` element) of
    ``report`` (the contract dict): host driver/CUDA, GPU memory/capability/platform, the
    argv's parallel sizes and memory fraction, and the model's weights and quantization."""
    host = report.get("host") or {}
    argv = [str(t) for t in entry.get("argv") or []]
    values = parse_argv(argv).values
    model = values.get("model") if isinstance(values.get("model"), str) else None
    files = _model_files(report, model) or {}
    config = files.get("config") if isinstance(files.get("config"), dict) else {}
    quant_cfg = files.get("quantization_config") or config.get("quantization_config") or {}
    quant_method = quant_cfg.get("quant_method") if isinstance(quant_cfg, dict) else None
    util = values.get("gpu_memory_utilization")
    out = {
        "nvidia_driver_version": host.get("nvidia_driver_version") or None,
        "cuda_driver_version": host.get("cuda_driver_version") or None,
        "image": entry.get("image") or None,
        "tp": _int(values.get("tensor_parallel_size")) or 1,
        "pp": _int(values.get("pipeline_parallel_size")) or 1,
        "gpu_memory_utilization": util if isinstance(util, (int, float)) else None,
        "quantization": values.get("quantization") if isinstance(
            values.get("quantization"), str) else None,
        "quant_method": str(quant_method).lower() if quant_method else None,
        "quant_config": quant_cfg if isinstance(quant_cfg, dict) and quant_cfg else None,
        "model": model,
        **_gpu_facts(report.get("gpus") or []),
    }
    out["weights_bytes"], out["weights_source"] = _weights(files, model, out)
    return out


def _weights(files: dict[str, Any], model: str | None,
             facts: dict[str, Any]) -> tuple[int | None, str | None]:
    reported = _int(files.get("weights_bytes"))
    if reported:
        return reported, "weights_bytes the node read from the model's files"
    params, _active = params_from_name(model)
    if not params:
        return None, None
    # The memory rules' own labelling (audit.kb.geometry), so this estimate and theirs agree.
    label, _how = detect_quantization(facts.get("quant_method") or facts.get("quantization"),
                                      None, model)
    if label is None:
        # no marker: the checkpoint's native format where models.yaml states it (gpt-oss
        # ships MXFP4 experts), as the memory rules assume (audit.kb.context model_block)
        label = (find_model(model) or {}).get("native_dtype")
    key = label if label in BYTES_PER_PARAM else "bf16"
    return int(params * 1e9 * BYTES_PER_PARAM[key]), (
        f"estimate: {params:g}B parameters (from the model name) x {BYTES_PER_PARAM[key]} "
        f"bytes ({key})")
