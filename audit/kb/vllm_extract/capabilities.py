"""What one vLLM release can serve, read statically from its source (wheel or tree).

Output of :func:`extract_capabilities` (``audit/kb/data/vllm/capabilities/<release>.json``):

* ``architectures``: {ArchitectureName: {"class": text|multimodal|pooling|speculative|
  transformers, "module": file stem}} from the ``_*_MODELS`` dicts of
  ``vllm/model_executor/models/registry.py``; ``previously_supported``: {arch: release
  text} from ``_PREVIOUSLY_SUPPORTED_MODELS`` where the release has it;
  ``config_model_types``: model types whose config class vLLM ships itself
  (``_CONFIG_REGISTRY`` in ``vllm/transformers_utils/config.py``: these load without
  ``--trust-remote-code``); ``remote_code_architectures``: registered architectures whose
  module loads Hugging Face code with ``trust_remote_code=True`` itself.
* ``quantization``: {method: {"min_capability": int (75 = sm_75) | None, "act_dtypes":
  [...], "class": ConfigClass}} from the ``QuantizationConfig`` subclasses under
  ``vllm/model_executor/layers/quantization`` (``get_name`` / ``get_min_capability`` /
  ``get_supported_act_dtypes``); ``quantization_methods``: the ``QuantizationMethods``
  Literal (what ``--quantization`` accepts); ``platform_quantization``:
  {platform: [methods]} from ``supported_quantization`` of ``vllm/platforms/*`` (CUDA:
  every method, so absent).
* ``attention_backends``: {NAME: {"class", "module" (source file), "platform",
  "head_sizes": {"supported", "depends"} over :data:`HEAD_SIZES`, "kv_cache_dtypes":
  {"supported", "depends"}, "dtypes",
  "compute_capability": {"supported", "depends"} over :data:`CAPABILITIES` (None = the
  class sets no limit), "mla", "sparse", "sliding_window", "sink", "encoder",
  "encoder_only"}} from the backend classes of ``vllm/v1/attention/backends`` (their
  ``get_name``, ``supports_*`` and ``get_supported_*`` class methods, through their bases,
  evaluated by :mod:`.pyeval`; "depends" = decided at run time by the installation);
  ``default_backends``: {"sm80" ...: {"mha": [...], "mla": [...]}} — the priority list of
  ``_get_backend_priorities`` in ``vllm/platforms/cuda.py`` per GPU class (0.11+).
* ``moe_experts``: {Class: {"activations": [...] | None, "quant_schemes": source text |
  None, "devices": source text | None}} from ``_supports_activation`` /
  ``_supports_quant_scheme`` / ``_supports_current_device`` under
  ``vllm/model_executor/layers/fused_moe`` (0.2x+).
* ``tool_parsers`` / ``reasoning_parsers``: registered names (lazy registration dicts or
  ``register_module`` decorators); ``kv_cache_dtypes``: the ``CacheDType`` Literal;
  ``platforms``: the ``PlatformEnum`` members; ``speculative_methods`` are in the release
  table already.

A part whose pattern the release does not have is empty ({} / []), never guessed.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from audit.kb.vllm_extract.pyeval import UNKNOWN, ClassIndex, Evaluator
from audit.kb.vllm_extract.source import SourceTree

FORMAT = 1
#: Head sizes published decoders use (64-256 dense, 80/96/112/160 older models, 192/576 MLA,
#: 512 Gemma 4 global layers); each backend is asked about each.
HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 256, 320, 512, 576)
#: GPU classes asked about: V100 7.0, T4 7.5, A100 8.0, A10/L4-class 8.6/8.9, H100 9.0,
#: B200 10.0, RTX Pro / 50-series 12.0.
CAPABILITIES = ((7, 0), (7, 5), (8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (12, 0))
_MODEL_CLASSES = {
    "_TEXT_GENERATION_MODELS": "text", "_MULTIMODAL_MODELS": "multimodal",
    "_EMBEDDING_MODELS": "pooling", "_CROSS_ENCODER_MODELS": "pooling",
    "_REWARD_MODELS": "pooling", "_TOKEN_CLASSIFICATION_MODELS": "pooling",
    "_SEQUENCE_CLASSIFICATION_MODELS": "pooling", "_LATE_INTERACTION_MODELS": "pooling",
    "_SPECULATIVE_DECODING_MODELS": "speculative",
    "_TRANSFORMERS_SUPPORTED_MODELS": "transformers",
    "_TRANSFORMERS_BACKEND_MODELS": "transformers", "_FALLBACK_MODEL": "transformers",
}

def _literal(node: ast.AST | None) -> Any:
    try:
        return ast.literal_eval(node) if node is not None else None
    except (ValueError, SyntaxError, TypeError):
        return None


def _assigned(module: ast.Module | None, name: str) -> ast.AST | None:
    for node in module.body if module else []:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name
                                                for t in node.targets):
            return node.value
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                and node.target.id == name:
            return node.value
    return None


def _literal_strings(node: ast.AST | None) -> list[str]:
    """``Literal["a", "b"]`` (also nested) -> ["a", "b"]."""
    return sorted({n.value for n in ast.walk(node) if isinstance(n, ast.Constant)
                   and isinstance(n.value, str)}) if node is not None else []


def _modules(src: SourceTree, prefix: str) -> list[tuple[str, ast.Module]]:
    return [(p, src.tree(p)) for p in sorted(src.files) if p.startswith(prefix)
            and src.tree(p) is not None]


# --------------------------------------------------------------------------- models

def read_models(src: SourceTree) -> dict[str, Any]:
    registry = src.tree("vllm/model_executor/models/registry.py")
    archs: dict[str, dict[str, str]] = {}
    for variable, klass in _MODEL_CLASSES.items():
        node = _assigned(registry, variable)
        if not isinstance(node, ast.Dict):
            continue
        for key, value in zip(node.keys, node.values, strict=False):
            name = _literal(key)
            if not isinstance(name, str):
                continue
            target = _literal(value)
            module = target[0] if isinstance(target, tuple) and target else None
            entry = archs.setdefault(name, {"class": klass, "module": module})
            if entry["class"] in ("transformers", "speculative") and klass not in (
                    "transformers", "speculative"):
                entry.update({"class": klass, "module": module})
    previous = _literal(_assigned(registry, "_PREVIOUSLY_SUPPORTED_MODELS"))
    config = src.tree("vllm/transformers_utils/config.py")
    config_types = _config_registry(config)
    remote = sorted(a for a, e in archs.items() if e["module"] and "trust_remote_code=True"
                    in src.files.get(f"vllm/model_executor/models/{e['module']}.py", ""))
    return {"architectures": dict(sorted(archs.items())),
            "previously_supported": previous if isinstance(previous, dict) else {},
            "config_model_types": config_types, "remote_code_architectures": remote}


def _config_registry(module: ast.Module | None) -> list[str]:
    node = _assigned(module, "_CONFIG_REGISTRY")
    if isinstance(node, ast.Call):  # LazyConfigDict(mllama=..., ...)/dict(...)
        return sorted(k.arg for k in node.keywords if k.arg)
    if isinstance(node, ast.Dict):
        return sorted(k for k in (_literal(key) for key in node.keys) if isinstance(k, str))
    return []


# --------------------------------------------------------------------------- quantization

def read_quantization(src: SourceTree) -> dict[str, Any]:
    modules = _modules(src, "vllm/model_executor/layers/quantization/")
    index = ClassIndex([m for _, m in modules])
    methods: dict[str, dict[str, Any]] = {}
    for name in sorted(index.classes):
        bases = {c.name for c in index.mro(name)}
        if "QuantizationConfig" not in bases or name == "QuantizationConfig":
            continue
        evaluator = Evaluator(index, name)
        method = evaluator.call("get_name")
        if not isinstance(method, str) or method is UNKNOWN:
            continue
        cap = evaluator.call("get_min_capability")
        acts = evaluator.call("get_supported_act_dtypes")
        methods.setdefault(method, {
            "class": name, "min_capability": cap if isinstance(cap, int) else None,
            "act_dtypes": sorted(set(acts)) if isinstance(acts, list) else None})
    init = src.tree("vllm/model_executor/layers/quantization/__init__.py")
    accepted = _literal_strings(_assigned(init, "QuantizationMethods")) or \
        [s for s in (_literal(_assigned(init, "QUANTIZATION_METHODS")) or [])
         if isinstance(s, str)]
    return {"quantization": methods, "quantization_methods": sorted(accepted),
            "platform_quantization": _platform_quantization(src)}


def _platform_quantization(src: SourceTree) -> dict[str, list[str]]:
    out = {}
    for path, module in _modules(src, "vllm/platforms/"):
        for klass in [n for n in module.body if isinstance(n, ast.ClassDef)]:
            value = ClassIndex([module]).attribute(klass.name, "supported_quantization")
            found = _literal(value) if value is not None else None
            if isinstance(found, list) and found and klass.name != "Platform":
                out[Path(path).stem] = sorted(str(f) for f in found)
    return out


# --------------------------------------------------------------------------- attention

def _platform_of(path: str) -> str:
    stem = Path(path).stem
    for key, platform in (("rocm", "rocm"), ("aiter", "rocm"), ("cpu", "cpu"),
                          ("pallas", "tpu"), ("xpu", "xpu"), ("zentorch", "cpu")):
        if key in stem:
            return platform
    return "cuda"


def _tri(results: dict[Any, Any]) -> dict[str, list]:
    return {"supported": [k for k, v in results.items() if v is True],
            "depends": [k for k, v in results.items() if v is UNKNOWN]}


def read_attention(src: SourceTree) -> dict[str, Any]:
    modules = _modules(src, "vllm/v1/attention/") + _modules(src, "vllm/attention/")
    index = ClassIndex([m for _, m in modules])
    where: dict[str, str] = {}
    for path, module in modules:  # the first definition wins, as in ClassIndex (v1 first)
        for node in module.body:
            if isinstance(node, ast.ClassDef):
                where.setdefault(node.name, path)
    kv_all: list[str] = []
    for path in ("vllm/config/cache.py", "vllm/config/__init__.py", "vllm/config.py"):
        kv_all = kv_all or _literal_strings(_assigned(src.tree(path), "CacheDType"))
    backends: dict[str, dict[str, Any]] = {}
    for label, name in _enum_backends(src).items():  # the selectable names (0.11+)
        if name in where:
            backends[label] = _backend(index, name, where[name], kv_all)
    named = {b["class"] for b in backends.values()}
    for name in sorted(index.classes, key=lambda n: (_platform_of(where.get(n, "")) != "cuda",
                                                     n)):
        if name in named or not where.get(name, "").startswith("vllm/v1/attention/backends/"):
            continue
        label = Evaluator(index, name).call("get_name")
        if not isinstance(label, str) or label is UNKNOWN or name.endswith("Impl"):
            continue
        backends.setdefault(label.removesuffix("_VLLM_V1"),
                            _backend(index, name, where[name], kv_all))
    return {"attention_backends": backends, "kv_cache_dtypes": kv_all,
            "default_backends": _defaults(src)}


def _enum_backends(src: SourceTree) -> dict[str, str]:
    """``AttentionBackendEnum`` members -> backend class name (the enum value's last part)."""
    module = src.tree("vllm/v1/attention/backends/registry.py")
    for node in module.body if module else []:
        if isinstance(node, ast.ClassDef) and node.name == "AttentionBackendEnum":
            out = {}
            for item in node.body:
                value = _literal(item.value) if isinstance(item, ast.Assign) else None
                if isinstance(value, str) and value and isinstance(item.targets[0], ast.Name):
                    out[item.targets[0].id] = value.rsplit(".", 1)[-1]
            return out
    return {}


def _backend(index: ClassIndex, name: str, path: str, kv_all: list[str]) -> dict[str, Any]:
    ev = Evaluator(index, name)
    if index.method(name, "supports_head_size"):
        heads = {h: ev.call("supports_head_size", h) for h in HEAD_SIZES}
    else:
        listed = ev.call("get_supported_head_sizes")
        heads = {h: (h in listed) if isinstance(listed, list) and listed else UNKNOWN
                 if listed is UNKNOWN else True for h in HEAD_SIZES}
    listed_kv = ev.expr(index.attribute(name, "supported_kv_cache_dtypes"), {}) \
        if index.attribute(name, "supported_kv_cache_dtypes") is not None else None
    if index.method(name, "supports_kv_cache_dtype"):
        kv = {d: ev.call("supports_kv_cache_dtype", d) for d in kv_all}
    else:
        kv = {d: (d in listed_kv) if isinstance(listed_kv, list) else UNKNOWN for d in kv_all}
    caps = None
    if index.method(name, "supports_compute_capability"):
        caps = {f"{a}.{b}": Evaluator(index, name, (a, b)).call(
            "supports_compute_capability", (a, b)) for a, b in CAPABILITIES}
    dtypes = ev.expr(index.attribute(name, "supported_dtypes"), {}) \
        if index.attribute(name, "supported_dtypes") is not None else None

    def flag(method: str, *args: Any) -> bool | None:
        if not index.method(name, method):
            return None
        value = ev.call(method, *args)
        return value if isinstance(value, bool) else None

    return {"class": name, "module": path, "platform": _platform_of(path),
            "head_sizes": _tri(heads),
            "kv_cache_dtypes": _tri(kv), "dtypes": dtypes if isinstance(dtypes, list) else None,
            "compute_capability": _tri(caps) if caps is not None else None,
            "mla": flag("is_mla") or "mla" in Path(path).parts or "MLA" in name.upper(),
            "sparse": flag("is_sparse"), "sliding_window": flag("supports_sliding_window"),
            "sink": flag("supports_sink"), "encoder": flag("supports_attn_type", "ENCODER"),
            "encoder_only": flag("supports_attn_type", "ENCODER_ONLY")}


def _defaults(src: SourceTree) -> dict[str, dict[str, list[str]]]:
    module = src.tree("vllm/platforms/cuda.py")
    func = next((n for n in ast.walk(module) if isinstance(n, ast.FunctionDef)
                 and n.name == "_get_backend_priorities"), None) if module else None
    if func is None:
        return {}
    out: dict[str, dict[str, list[str]]] = {}
    for major, minor in CAPABILITIES:
        row = {}
        for kind, use_mla in (("mha", False), ("mla", True)):
            ev = Evaluator(None, None, (major, minor))
            value = ev.run(func, [use_mla, (major, minor)])
            if isinstance(value, list):
                row[kind] = [str(v) for v in value]
        if row:
            out[f"sm{major}{minor}"] = row
    return out


# --------------------------------------------------------------------------- MoE, parsers

def read_moe(src: SourceTree) -> dict[str, dict[str, Any]]:
    modules = _modules(src, "vllm/model_executor/layers/fused_moe/")
    index = ClassIndex([m for _, m in modules])
    out: dict[str, dict[str, Any]] = {}
    for name in sorted(index.classes):
        act = index.method(name, "_supports_activation")
        if act is None or name.startswith("FusedMoE") and name.endswith(("Modular", "Base")):
            continue
        acts = {a for a in _activation_names(src)
                if Evaluator(index, name).run(act, [a]) is True}
        quant = index.method(name, "_supports_quant_scheme")
        device = index.method(name, "_supports_current_device")
        out[name] = {"activations": sorted(acts) or None,
                     "quant_schemes": _returned(quant), "devices": _returned(device)}
    return out


def _activation_names(src: SourceTree) -> list[str]:
    for _path, module in _modules(src, "vllm/model_executor/layers/fused_moe/"):
        for node in module.body:
            if isinstance(node, ast.ClassDef) and node.name == "MoEActivation":
                return [t.id for n in node.body if isinstance(n, ast.Assign)
                        for t in n.targets if isinstance(t, ast.Name)]
    return []


def _returned(func: ast.FunctionDef | None) -> str | None:
    """The source of a method's return expressions (a short, quoted source fact)."""
    if func is None:
        return None
    text = " | ".join(ast.unparse(n.value) for n in ast.walk(func)
                      if isinstance(n, ast.Return) and n.value is not None)
    return text[:300] or None


def read_parsers(src: SourceTree, package: str, variable: str, manager: str) -> list[str]:
    """Registered parser names: the lazy ``{name: (file, class)}`` dict, else
    ``@Manager.register_module("name")`` / ``register_module(["a", "b"])`` decorators."""
    names: set[str] = set()
    node = _assigned(src.tree(f"{package}/__init__.py"), variable)
    if isinstance(node, ast.Dict):
        names |= {k for k in (_literal(key) for key in node.keys) if isinstance(k, str)}
    for _path, module in _modules(src, package + "/"):
        for call in [n for n in ast.walk(module) if isinstance(n, ast.Call)]:
            func = ast.unparse(call.func)
            if func.startswith(manager) and func.endswith(".register_module"):
                for arg in call.args[:1] + [k.value for k in call.keywords if k.arg == "name"]:
                    value = _literal(arg)
                    names |= {value} if isinstance(value, str) else \
                        {v for v in value or [] if isinstance(v, str)}
    return sorted(names)


def _parser_package(src: SourceTree, *candidates: str) -> str:
    return next((c for c in candidates if f"{c}/__init__.py" in src.files), candidates[-1])


def read_platforms(src: SourceTree) -> list[str]:
    module = src.tree("vllm/platforms/interface.py")
    for node in module.body if module else []:
        if isinstance(node, ast.ClassDef) and node.name == "PlatformEnum":
            return [t.id for n in node.body if isinstance(n, ast.Assign)
                    for t in n.targets if isinstance(t, ast.Name)]
    return []


def extract_capabilities(location: Path) -> dict[str, Any]:
    """Everything above for one wheel / source dir. Raises FileNotFoundError (no sources)."""
    src = SourceTree(location)
    tools = _parser_package(src, "vllm/tool_parsers", "vllm/entrypoints/openai/tool_parsers")
    reasoning = _parser_package(src, "vllm/reasoning", "vllm/entrypoints/openai/reasoning")
    return {
        "format": FORMAT, "release": src.version(),
        "provenance": {"read_by": "audit.kb.vllm_extract.capabilities (ast)",
                       "file": location.name},
        **read_models(src), **read_quantization(src), **read_attention(src),
        "moe_experts": read_moe(src),
        "tool_parsers": read_parsers(src, tools, "_TOOL_PARSERS_TO_REGISTER",
                                     "ToolParserManager"),
        "reasoning_parsers": read_parsers(src, reasoning, "_REASONING_PARSERS_TO_REGISTER",
                                          "ReasoningParserManager"),
        "platforms": read_platforms(src),
    }
