"""Which values of a platform-bound option apply to one server's platform and GPU.

A failed start's explanation (:mod:`audit.kb.failed_start_explain`) offers valid values of
an option; some of vLLM's values exist for one platform only (``fp8_inc`` is Intel Gaudi's
KV-cache dtype). :func:`applicable` keeps the values the release's capability table
(:mod:`audit.kb.release_caps`) accepts on the server's platform and GPU:

* ``--kv-cache-dtype``: the KV-cache dtypes some attention backend of that platform stores
  (its ``supported`` list, and ``depends`` when it narrows the release's list), among the
  backends whose stated compute-capability range includes the GPU's;
* ``--quantization``: on CUDA the methods whose ``min_capability`` the GPU meets, on ROCm/XPU
  the table's ``platform_quantization`` list of that platform;
* ``--attention-backend``: the backends of that platform whose stated range includes the GPU.

Returns None when the option is not platform-bound, the platform is unknown, or the table
states nothing for it: the caller then lists the values without picking one.
"""

from __future__ import annotations

from typing import Any

from audit.kb.release_caps import caps

#: Platforms as the capability tables name them (``attention_backends[*].platform``).
PLATFORMS = ("cuda", "rocm", "cpu", "xpu", "tpu")


def _cc_key(cc: float | None) -> str | None:
    return f"{cc:.1f}" if cc is not None else None


def _backends(table: dict[str, Any], platform: str, cc: float | None) -> dict[str, Any]:
    key = _cc_key(cc)
    out = {}
    for name, spec in (table.get("attention_backends") or {}).items():
        if (spec.get("platform") or "").lower() != platform:
            continue
        stated = spec.get("compute_capability")
        if key and stated and (stated["supported"] or stated["depends"]) and \
                key not in stated["supported"] + stated["depends"]:
            continue
        out[name] = spec
    return out


def _kv_dtypes(table: dict[str, Any], platform: str, cc: float | None) -> set[str] | None:
    every = set(table.get("kv_cache_dtypes") or [])
    found: set[str] = set()
    for spec in _backends(table, platform, cc).values():
        kv = spec.get("kv_cache_dtypes") or {}
        found |= set(kv.get("supported") or [])
        if set(kv.get("depends") or []) != every:  # "depends" on everything says nothing
            found |= set(kv.get("depends") or [])
    return found or None


def _quantization(table: dict[str, Any], platform: str, cc: float | None) -> set[str] | None:
    if platform in (table.get("platform_quantization") or {}):
        return set(table["platform_quantization"][platform])
    if platform == "cuda" and cc is not None:
        return {name for name, spec in (table.get("quantization") or {}).items()
                if spec.get("min_capability") is None
                or spec["min_capability"] <= round(cc * 10)}
    return None


def applicable(release: str, flag: str, values: list[str], platform: str | None,
               cc: float | None) -> list[str] | None:
    """``values`` (order kept) that apply on ``platform`` (one of :data:`PLATFORMS`) with a
    GPU of compute capability ``cc`` (e.g. 8.9; None when unknown), by ``release``'s
    capability table; None when that cannot be told (module docstring). Raises
    FileNotFoundError when the release has no capability table."""
    if platform not in PLATFORMS:
        return None
    table = caps(release)
    if flag == "--kv-cache-dtype":
        accepted = _kv_dtypes(table, platform, cc)
    elif flag == "--quantization":
        accepted = _quantization(table, platform, cc)
    elif flag == "--attention-backend":
        accepted = set(_backends(table, platform, cc)) or None
    else:
        return None
    if accepted is None:
        return None
    return [v for v in values if v in accepted]


def platform_bound(flag: str) -> bool:
    """True for the options whose values depend on the platform (module docstring)."""
    return flag in ("--kv-cache-dtype", "--quantization", "--attention-backend")
