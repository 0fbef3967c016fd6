"""Can this release serve this model on this GPU, by vLLM's own capability tables?

:func:`support_block` returns the context's ``support`` block: ``release`` (the capability
table used, :func:`audit.kb.vllm_tables.table_release` of the running version), ``known``
(a table was read) and one list of sentences per kind of problem — ``architecture``,
``quantization``, ``moe``, ``kv_cache``, ``parsers``, ``speculative``. Each
sentence names what the release supports instead and the nearest known release that
supports what was asked (or says none does); a forced attention backend is judged in
``model.attention`` (:mod:`audit.kb.backends`, same tables). Generic rules in
(``cap-*``, in the subject files of ``audit/rules``) turn a non-empty list into a finding.

Only facts the tables state are used: a capability the source leaves to run time
("depends") or a value outside the tabulated grid (:data:`HEAD_SIZES`, :data:`CAPABILITIES`)
is never a problem. The same function judges a planned release (the upgrade planner passes
the target release).
"""

from __future__ import annotations

from typing import Any

from packaging.version import InvalidVersion, Version

from audit.kb.release_caps import architecture_index, caps, first_release_with
from audit.kb.vllm_extract.capabilities import CAPABILITIES, HEAD_SIZES
from audit.kb.vllm_tables import option, releases, table

KINDS = ("architecture", "quantization", "moe", "kv_cache", "parsers", "speculative")
_CC_KEYS = {f"{a}.{b}" for a, b in CAPABILITIES}
#: config.json ``hidden_act`` -> vLLM's MoEActivation member (vllm/model_executor/layers/
#: fused_moe activation enum; gpt-oss's "swigluoai").
_ACTIVATIONS = {"silu": "SILU", "swish": "SILU", "gelu": "GELU", "gelu_pytorch_tanh": "GELU",
                "gelu_new": "GELU", "swigluoai": "SWIGLUOAI", "relu2": "RELU2_NO_MUL"}


def empty(release: str | None = None) -> dict[str, Any]:
    return {"release": release, "known": False, **{k: [] for k in KINDS}}


def _first(predicate: Any, release: str) -> str:
    found = first_release_with(predicate, release)
    return f"first known release with it: {found}" if found else \
        f"no known release through {releases()[-1]} has it"


def _short(names: Any, limit: int = 8) -> str:
    items = sorted(names)
    return ", ".join(items[:limit]) + (f" (+{len(items) - limit} more)"
                                       if len(items) > limit else "")


Problems = list[tuple[str, Any]]  # (sentence, predicate "a table has it" or None)


def architecture_problems(release: str, architectures: list[str]) -> Problems:
    table = caps(release)
    if not table["architectures"]:
        return []
    out = []
    index = architecture_index()
    for arch in architectures:
        if arch in table["architectures"]:
            continue
        later = [r for r in index.get(arch, ()) if r not in releases()[:releases().index(
            release) + 1]]
        removed = table.get("previously_supported", {}).get(arch)
        similar = [a for a in table["architectures"] if a[:6].lower() == arch[:6].lower()]
        text = f"{arch} is not registered in vLLM {release}"
        if removed:
            text += f" (removed: {removed})"
        if similar:
            text += f"; it registers {_short(similar, 5)}"
        text += (f"; first known release registering it: {later[0]}" if later else
                 f"; no known release through {releases()[-1]} registers it (only vLLM's "
                 "Transformers fallback with --trust-remote-code or a plugin can load it)")
        out.append((text, lambda t, a=arch: a in t["architectures"]))
    return out


def quantization_problems(release: str, method: str | None, cc: float | None,
                          vendor: str | None) -> Problems:
    if not method:
        return []
    table = caps(release)
    method = method.lower()
    accepted = table["quantization_methods"]
    if accepted and method not in accepted and method not in table["quantization"]:
        known = (lambda t: method in t["quantization_methods"])  # noqa: E731
        return [(f"quantization {method} is not a method vLLM {release} knows "
                 f"({_first(known, release)})", known)]
    entry = table["quantization"].get(method)
    out = []
    need = entry.get("min_capability") if entry else None
    if entry and need and cc is not None and vendor != "amd" and round(cc * 10) < need:
        have = round(cc * 10)
        runs = [m for m, e in table["quantization"].items()
                if isinstance(e.get("min_capability"), int) and e["min_capability"] <= have]

        def lower(t: dict[str, Any]) -> bool:
            limit = (t["quantization"].get(method) or {}).get("min_capability")
            return isinstance(limit, int) and limit <= have

        later = first_release_with(lower, release)
        out.append((
            f"quantization {method} needs compute capability {need / 10:.1f} in vLLM "
            f"{release} (get_min_capability {need}); this GPU is {cc}. Methods this release "
            f"runs at {cc}: {_short(runs)}; " + (
                f"first known release that runs {method} at {cc}: {later}" if later else
                f"no known release through {releases()[-1]} runs {method} at {cc}"), None))
    rocm = table.get("platform_quantization", {}).get("rocm")
    if vendor == "amd" and rocm and method not in rocm:
        out.append((f"quantization {method} is not in vLLM {release}'s ROCm list "
                    f"({_short(rocm)})", None))
    return out


def _cc_key(cc: float | None) -> str | None:
    key = f"{cc:.1f}" if cc is not None else None
    return key if key in _CC_KEYS else None


def backend_problems(spec: dict[str, Any], arch: dict[str, Any], cc: float | None,
                     kv_dtype: str | None) -> list[str]:
    """Stated limits of one backend entry that this model / GPU / KV dtype breaks."""
    out = []
    heads = spec["head_sizes"]
    for size in arch.get("head_dims") or []:
        if size in HEAD_SIZES and size not in heads["supported"] + heads["depends"]:
            out.append(f"head size {size} (supports {heads['supported'] or 'none listed'})")
    if spec.get("mla") is True and arch.get("known") and not arch.get("is_mla"):
        out.append("MLA-only backend, the model has no MLA layers")
    if spec.get("mla") is False and arch.get("is_mla"):
        out.append("cannot serve MLA")
    if spec.get("sliding_window") is False and (arch.get("layer_counts") or {}).get("sliding"):
        out.append("no sliding-window support, the model has sliding-window layers")
    key, caps_range = _cc_key(cc), spec.get("compute_capability")
    if key and caps_range and key not in caps_range["supported"] + caps_range["depends"]:
        listed = caps_range["supported"]
        out.append(f"needs compute capability {listed[0]} or newer, the GPU is {key}"
                   if listed and float(listed[0]) > float(key) else
                   f"compute capability {key} not supported (supports {listed or 'none'})")
    kv = spec["kv_cache_dtypes"]
    if kv_dtype and (kv["supported"] or kv["depends"]) and \
            kv_dtype not in kv["supported"] + kv["depends"]:
        out.append(f"KV-cache dtype {kv_dtype} (stores {kv['supported']})")
    return out


def kv_cache_problems(release: str, kv_dtype: str | None, forced: str | None,
                      arch: dict[str, Any], cc: float | None) -> Problems:
    if not kv_dtype or kv_dtype == "auto":
        return []
    table = caps(release)
    if table["kv_cache_dtypes"] and kv_dtype not in table["kv_cache_dtypes"]:
        known = (lambda t: kv_dtype in t["kv_cache_dtypes"])  # noqa: E731
        return [(f"--kv-cache-dtype {kv_dtype} is not accepted by vLLM {release} (accepts "
                 f"{_short(table['kv_cache_dtypes'])}; {_first(known, release)})", known)]
    key = _cc_key(cc)
    if forced or not key:  # a forced backend is judged by attention_problems
        return []
    order = (table.get("default_backends") or {}).get(f"sm{key.replace('.', '')}", {})
    candidates = order.get("mla" if arch.get("is_mla") else "mha") or []
    specs = [table["attention_backends"][b] for b in candidates
             if b in table["attention_backends"]]
    if not specs or any(kv_dtype in s["kv_cache_dtypes"]["supported"]
                        + s["kv_cache_dtypes"]["depends"] for s in specs):
        return []
    return [(f"no attention backend vLLM {release} would pick on compute capability {key} "
             f"({_short(candidates)}) stores a {kv_dtype} KV cache", None)]


def moe_problems(release: str, backend: str | None, hidden_act: str | None,
                 is_moe: bool) -> Problems:
    if not backend or backend == "auto" or not is_moe:
        return []
    try:
        choices = option(release, "--moe-backend").get("choices") or []
    except KeyError:
        choices = []
    if not choices:  # the release has no such option: the flag check reports it
        return []
    if backend not in choices:
        return [(f"--moe-backend {backend} is not one vLLM {release} accepts "
                 f"({_short(choices)})", None)]
    act = _ACTIVATIONS.get(str(hidden_act or "").lower())
    token = backend.replace("_", "").lower()
    classes = {n: e for n, e in caps(release)["moe_experts"].items()
               if token in n.lower().replace("_", "") and e.get("activations")}
    if act and classes and all(act not in e["activations"] for e in classes.values()):
        supported = sorted({a for e in classes.values() for a in e["activations"]})
        return [(f"--moe-backend {backend} kernels in vLLM {release} ({_short(classes)}) "
                 f"support activations {supported}, not the model's {hidden_act}", None)]
    return []


def parser_problems(release: str, tool: str | None, reasoning: str | None,
                    plugin: bool) -> Problems:
    if plugin:
        return []
    table, out = caps(release), []
    for label, name, key in (("tool-call", tool, "tool_parsers"),
                             ("reasoning", reasoning, "reasoning_parsers")):
        known = table.get(key) or []
        if name and known and name not in known:
            similar = [p for p in known if p[:4] == name[:4]]
            has = (lambda t, k=key, n=name: n in (t.get(k) or []))  # noqa: E731
            out.append((f"{label} parser {name} is not registered in vLLM {release}"
                        + (f" (it has {_short(similar)})" if similar else "")
                        + f"; {_first(has, release)}", has))
    return out


def speculative_problems(release: str, method: str | None) -> Problems:
    methods = table(release)["speculative"]["methods"]
    if not method or not methods or method in methods:
        return []
    newer = releases()[releases().index(release) + 1:]
    later = next((r for r in newer if method in table(r)["speculative"]["methods"]), None)
    older = [r for r in releases()[:releases().index(release)]
             if method in table(r)["speculative"]["methods"]]
    gone = f" (last known release with it: {older[-1]})" if older and not later else ""
    return [(f"speculative method {method} is not in vLLM {release} (it has "
             f"{_short(methods)}); " + (f"first known release with it: {later}" if later else
                                         f"no known release through {releases()[-1]} has it")
             + gone, lambda t: method in (t.get("speculative_methods") or []))]


def _kept(problems: list[tuple[str, Any]], nearest: dict[str, Any] | None) -> list[str]:
    """Drop a "the release lacks X" problem when the running version lies between two
    tables and the next table has X (it may have come in between: precision first)."""
    return [text for text, has in problems
            if nearest is None or has is None or not has(nearest)]


def support_block(release: str | None, *, arch: dict[str, Any], flags: dict[str, Any],
                  gpu: dict[str, Any], quantization: str | None, spec_method: str | None,
                  hidden_act: str | None, parser_plugin: bool = False,
                  version: str | None = None) -> dict[str, Any]:
    """``support`` (module docstring) for ``release``; ``empty`` when none is known.
    ``version``: the running version when it is not ``release`` itself (None = exact)."""
    if not release:
        return empty()
    out = empty(release)
    out["known"] = True
    newer = releases()[releases().index(release) + 1:]
    nearest = None
    if version and newer and _base(version) != _base(release):
        nearest = {**caps(newer[0]),
                   "speculative_methods": table(newer[0])["speculative"]["methods"]}
    cc, vendor = gpu.get("cc"), gpu.get("vendor")
    kv = flags.get("kv_cache_dtype") if isinstance(flags.get("kv_cache_dtype"), str) else None
    forced = flags.get("attention_backend") if isinstance(flags.get("attention_backend"),
                                                          str) else None
    found = {
        "architecture": architecture_problems(release, list(arch.get("architectures") or [])),
        "quantization": quantization_problems(release, quantization, cc, vendor),
        "kv_cache": kv_cache_problems(release, kv, forced, arch, cc),
        "moe": moe_problems(release, flags.get("moe_backend"), hidden_act,
                            bool(arch.get("is_moe"))),
        "parsers": parser_problems(release, flags.get("tool_call_parser"),
                                   flags.get("reasoning_parser"), parser_plugin),
        "speculative": speculative_problems(release, spec_method)}
    for kind, problems in found.items():
        out[kind] = _kept(problems, nearest)
    return out


def _base(version: str) -> tuple[int, ...]:
    try:
        return Version(version).release[:3]
    except InvalidVersion:
        return ()
