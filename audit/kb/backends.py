"""Can the forced attention backend serve this model on this GPU?

Facts: the running release's extracted capability table
(``data/vllm/capabilities/<release>.json``, :mod:`audit.kb.vllm_extract.capabilities`:
head sizes, KV-cache dtypes, compute capability range, MLA, sliding window, read from the
backend classes' ``supports_*`` methods) first; ``data/attention_backends.yaml`` keeps only
hand facts with their source, used where the release's source states nothing (a backend the
table lacks, or a compute capability limit an old release enforces outside the class).
:func:`attention_block` returns ``model.attention``: ``forced`` (the backend named by
``--attention-backend`` or ``VLLM_ATTENTION_BACKEND``, upper-case, None when vLLM chooses),
``problems`` (why the forced backend cannot serve, the last one naming the nearest release
where it can), ``can_serve`` (False only when a stated limit is broken; None when nothing is
forced or the backend is unknown) and ``would_serve`` (the release's backends of the same
platform and attention kind with no broken limit for this model, GPU and KV dtype).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from audit.kb.cel_functions import version_in
from audit.kb.paths import load_data, safe_load_yaml
from audit.kb.release_caps import caps, first_release_with
from audit.kb.support import backend_problems
from audit.kb.vllm_tables import releases, table_release


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


def _hand_only(name: str, spec: dict[str, Any] | None, arch: dict[str, Any],
               cc: float | None, kv_dtype: str | None, version: str | None,
               hand: dict[str, dict[str, Any]]) -> list[str]:
    """Hand limits for what the extracted ``spec`` does not state."""
    if spec is None:
        return problems(name, arch, cc, kv_dtype, version, hand)
    if spec.get("compute_capability") is None and name in hand:
        only_cc = {k: v for k, v in hand[name].items() if k == "min_cc"}
        return problems(name, arch, cc, None, version, {name: only_cc})
    return []


def attention_block(forced: Any, arch: dict[str, Any], cc: float | None,
                    kv_dtype: str | None, version: str | None) -> dict[str, Any]:
    """``model.attention`` (see the module docstring)."""
    name = str(forced).strip().upper() if isinstance(forced, str) and forced.strip() else None
    out: dict[str, Any] = {"forced": name, "problems": [], "can_serve": None,
                           "would_serve": []}
    if not arch.get("known"):
        return out
    release = table_release(version)[0]
    extracted = caps(release)["attention_backends"]
    hand = backends()
    platform = (extracted.get(name) or {}).get("platform", "cuda")
    mla = bool(arch.get("is_mla"))
    out["would_serve"] = [b for b, s in extracted.items() if s["platform"] == platform
                          and s.get("mla") == mla and not backend_problems(s, arch, cc,
                                                                           kv_dtype)
                          and not _hand_only(b, s, arch, cc, kv_dtype, version, hand)]
    if name and extracted and name not in extracted:
        later = first_release_with(lambda t: name in t["attention_backends"], release)
        out["problems"] = [f"vLLM {release} has no attention backend {name} ("
                           + (f"first known release with it: {later}" if later else
                              f"no known release through {releases()[-1]} has it") + ")"]
        out["can_serve"] = False
    elif name and (name in extracted or name in hand):
        spec = extracted.get(name)
        found = [f"{name}: {p}" for p in backend_problems(spec, arch, cc, kv_dtype)] \
            if spec else []
        found += _hand_only(name, spec, arch, cc, kv_dtype, version, hand)
        if found:
            later = first_release_with(
                lambda t: name in t["attention_backends"] and not backend_problems(
                    t["attention_backends"][name], arch, cc, kv_dtype), release)
            found.append(f"first known release where {name} can serve it: {later}" if later
                         else f"no known release through {releases()[-1]} lets {name} "
                         "serve it")
        out["problems"] = found
        out["can_serve"] = not found
    return out
