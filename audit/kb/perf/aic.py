"""Step times from NVIDIA aiconfigurator's measured kernel data (the optional ``perf`` extra).

``aiconfigurator-core`` (PyPI, Apache-2.0; https://github.com/ai-dynamo/aiconfigurator)
models an engine step from per-kernel measurements (GEMM, attention, MoE, communication)
collected per GPU system, framework and framework version. What its 0.12.0 wheel covers for
vLLM (``systems/support_matrix/*.csv``, agg mode, status PASS): h100_sxm, h200_sxm,
b200_sxm, b300_sxm, gb200, gb300, l40s and rtx_pro_6000_server at vLLM 0.24.0, a100_sxm at
0.14.0; Gemma 4 26B-A4B (BF16 on Hopper/Blackwell, NVFP4 on B200/GB200), Gemma 4 31B NVFP4
on B200/GB200 only; no AWQ/GPTQ checkpoints and no GB10. Anything else falls back to the
roofline (audit.kb.perf.roofline) and the prediction says why.

:func:`coverage` answers whether a command is covered (by the support matrix, never by a
guess); :func:`step_function` returns a step model with the signature of
:func:`audit.kb.perf.roofline.roofline_step` backed by ``EngineHandle.mixed_step_latency``.
Speculative decoding enters as verify tokens (running x (k + 1) generation tokens); the
drafter's own forward passes are not in the kernel model.
"""

from __future__ import annotations

from functools import cache, lru_cache
from typing import Any

from audit.kb.perf.facts import CommandFacts, Load

#: audit/kb/data/gpus.yaml label -> aiconfigurator system name (systems/*.yaml of the wheel).
SYSTEMS = {
    "H100 SXM5 80GB HBM3": "h100_sxm", "H100 PCIe": "h100_pcie", "H200 / H200 NVL": "h200_sxm",
    "B200": "b200_sxm", "B300": "b300_sxm", "GB200 (per GPU)": "gb200",
    "L40S": "l40s", "RTX PRO 6000 Blackwell": "rtx_pro_6000_server",
    "A100 80GB SXM4": "a100_sxm", "A100 40GB SXM4": "a100_sxm",
}
_KV_MODES = {"fp8": "fp8", "fp8_e4m3": "fp8"}


def available() -> bool:
    """Whether the optional ``aiconfigurator-core`` distribution is importable."""
    try:
        import aiconfigurator_core.sdk  # noqa: F401
    except ImportError:
        return False
    return True


@cache
def _matrix() -> tuple[tuple[str, str, str, str], ...]:
    from aiconfigurator_core.sdk.common import get_support_matrix

    return tuple((r["HuggingFaceID"], r["System"], r["Version"], r["Status"])
                 for r in get_support_matrix()
                 if r.get("Backend") == "vllm" and r.get("Mode") == "agg")


def versions(model: str | None, system: str) -> list[str]:
    """vLLM versions the support matrix passes for ``model`` on ``system``, oldest first."""
    from packaging.version import Version

    found = {r[2] for r in _matrix() if r[0] == model and r[1] == system and r[3] == "PASS"}
    return sorted(found, key=Version)


def coverage(f: CommandFacts) -> dict[str, Any]:
    """``{"covered": bool, "system", "vllm", "why"}`` for this command's model and GPU."""
    if not available():
        return {"covered": False, "system": None, "vllm": None,
                "why": "aiconfigurator-core is not installed (pip install '.[perf]')"}
    system = SYSTEMS.get(f.gpu_label or "")
    if system is None:
        return {"covered": False, "system": None, "vllm": None,
                "why": f"no aiconfigurator kernel data for {f.gpu_label or 'this GPU'}"}
    rows = [r for r in _matrix() if r[0] == f.model and r[1] == system]
    passing = [r for r in rows if r[3] == "PASS"]
    if not passing:
        state = rows[0][3] if rows else "not in its support matrix"
        return {"covered": False, "system": system, "vllm": None,
                "why": f"aiconfigurator's vLLM data for {system}: {f.model} {state}"}
    return {"covered": True, "system": system, "vllm": passing[0][2],
            "why": f"kernel data for {system}, vLLM {passing[0][2]} (aiconfigurator-core)"}


@lru_cache(maxsize=16)  # a compiled engine holds its perf tables: keep a fleet's worth
def _engine(model: str, system: str, version: str, tp: int, pp: int, kv_mode: str | None):
    from aiconfigurator_core.sdk import EngineHandle

    kwargs = {"tp_size": tp, "pp_size": pp}
    if kv_mode:
        kwargs["kvcache_quant_mode"] = kv_mode
    return EngineHandle.compile(model, system, "vllm", backend_version=version, **kwargs)


class KernelDataError(RuntimeError):
    """aiconfigurator could not price a step (a kernel shape its tables lack, e.g. Gemma 4's
    sliding-window attention on some systems): the caller falls back to the roofline."""


def step_function(f: CommandFacts, load: Load, cover: dict[str, Any]):
    """A step model (seconds) for :func:`audit.kb.perf.roofline.operating_point` from
    aiconfigurator's mixed prefill + decode step at this prompt/output length. Raises
    :class:`KernelDataError` (compiling, or at a step) when the library fails."""
    try:
        engine = _engine(f.model, cover["system"], cover["vllm"], f.tp, f.pp,
                         _KV_MODES.get((f.kv_cache_dtype or "").lower()))
    except Exception as exc:  # noqa: BLE001 - any failure of the optional library
        raise KernelDataError(_first_line(exc)) from exc
    isl, osl = int(load.prompt_tokens), max(2, int(load.output_tokens))

    def step(_f: CommandFacts, running: float, tokens_per_seq: int, _context: float,
             prefill_tokens: float) -> float:
        try:
            return engine.mixed_step_latency(int(prefill_tokens),
                                             int(running * tokens_per_seq), isl, osl) / 1000.0
        except Exception as exc:  # noqa: BLE001 - any failure of the optional library
            raise KernelDataError(_first_line(exc)) from exc

    return step


def _first_line(exc: Exception) -> str:
    text = str(exc).splitlines()[0][:160] if str(exc) else ""
    return f"{type(exc).__name__}: {text}"
