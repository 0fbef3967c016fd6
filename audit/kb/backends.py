"""Can the forced attention backend serve this model on this GPU? (issue 11)

Data: ``data/attention_backends.yaml`` (sourced limits per backend). :func:`attention_block`
returns ``model.attention``: ``forced`` (the backend named by ``--attention-backend`` or
``VLLM_ATTENTION_BACKEND``, upper-case, None when vLLM chooses), ``problems`` (why the forced
backend cannot serve: head size, MLA, KV dtype, compute capability), ``can_serve`` (False only
when a sourced limit is broken; None when nothing is forced or the backend is unknown) and
``would_serve`` (the listed backends with no broken limit for this model, GPU and KV dtype).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from audit.kb.cel_functions import version_in
from audit.kb.paths import load_data, safe_load_yaml


def _parse(path: Path) -> dict[str, dict[str, Any]]:
    return safe_load_yaml(path.read_text(encoding="utf-8"))["backends"]


def backends() -> dict[str, dict[str, Any]]:
    """Backend name -> sourced limits, from the active KB's ``attention_backends.yaml`` (an
    installed bundle's once one is; :func:`audit.kb.paths.load_data`). A missing file raises
    FileNotFoundError naming it."""
    return load_data("attention_backends.yaml", _parse)


def _kv_dtypes(spec: dict[str, Any], version: str | None) -> list[str] | None:
    for entry in spec.get("kv_cache_dtypes") or []:
        if version and version_in(version, entry["versions"]):
            return entry["dtypes"]
    return None


def problems(name: str, arch: dict[str, Any], cc: float | None, kv_dtype: str | None,
             version: str | None, table: dict[str, dict[str, Any]] | None = None) -> list[str]:
    """Sourced limits of backend ``name`` that this model/GPU/KV dtype breaks (``table``:
    :func:`backends`, read once by a caller that checks every backend)."""
    spec = (table if table is not None else backends()).get(name)
    if spec is None:
        return []
    out = []
    if spec.get("mla") is True and not arch.get("is_mla"):
        out.append(f"{name} serves MLA models only; this model has no MLA layers")
    if spec.get("mla") is False and arch.get("is_mla"):
        out.append(f"{name} cannot serve MLA (kv_lora_rank {arch.get('kv_lora_rank')})")
    for size in arch.get("head_dims") or []:
        if spec.get("head_sizes") and size not in spec["head_sizes"]:
            out.append(f"head size {size} not in {name}'s {spec['head_sizes']}")
        elif spec.get("head_size_max") and size > spec["head_size_max"]:
            out.append(f"head size {size} above {name}'s maximum {spec['head_size_max']}")
    if cc is not None and spec.get("min_cc") and cc < spec["min_cc"]:
        out.append(f"{name} needs compute capability {spec['min_cc']}, the GPU is {cc}")
    allowed = _kv_dtypes(spec, version)
    if allowed and kv_dtype and kv_dtype not in allowed:
        out.append(f"--kv-cache-dtype {kv_dtype} not supported by {name} ({allowed})")
    return out


def attention_block(forced: Any, arch: dict[str, Any], cc: float | None,
                    kv_dtype: str | None, version: str | None) -> dict[str, Any]:
    """``model.attention`` (see the module docstring)."""
    name = str(forced).strip().upper() if isinstance(forced, str) and forced.strip() else None
    out: dict[str, Any] = {"forced": name, "problems": [], "can_serve": None,
                           "would_serve": []}
    if not arch.get("known"):
        return out
    table = backends()
    out["would_serve"] = [b for b in table
                          if not problems(b, arch, cc, kv_dtype, version, table)]
    if name and name in table:
        out["problems"] = problems(name, arch, cc, kv_dtype, version, table)
        out["can_serve"] = not out["problems"]
    return out
