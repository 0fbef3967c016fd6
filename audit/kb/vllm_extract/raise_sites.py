"""vLLM's start-up raise sites, per release, read statically from its source (``ast``).

A *raise site* is one place where vLLM stops a start with an exception: ``raise X(msg)``,
``assert cond, msg`` and ``parser.error(msg)`` in the code a ``vllm serve`` runs before it
serves (argument parsing, config validation, model/weights and LoRA loading, platform / attention
/ MoE / quantization backend and kernel selection, engine and worker start; :data:`SCOPE`).
Sites whose message is no template (``raise ValueError(msg_from_elsewhere)``, a bare
``assert x``) or has under 8 literal characters are left out: no log line can be matched
to them. Each site is written as::

    {"exc": "ValueError",                  # exception class (last dotted part)
     "pattern": "Invalid (?P<h0>.+?) x",   # the message as a regex: literal parts escaped,
                                           # every hole of the f-string / .format / % template
                                           # a lazy named group
     "literal": 17,                        # characters of literal text (a match's weight)
     "holes": ["self.cache_dtype"],        # source of each hole's expression, in order
     "at": "vllm/config/cache.py:123",     # where it is raised
     "function": "CacheConfig._verify",    # enclosing class.function
     "guard": "self.cache_dtype not in…",  # the enclosing if/assert condition (source, ≤ 240)
     "reads": ["--kv-cache-dtype", "env:VLLM_X", "hf:head_dim"]}  # settings it reads

``reads`` are the settings the guard and the holes read, in the operator's terms: an attribute
or name whose last part is a field of a config class behind a ``vllm serve`` option (through
that release's option table: the option's ``config_field`` or ``dest``; ``cache_dtype`` is
``--kv-cache-dtype``) is that flag; ``envs.VLLM_*`` / ``os.environ["VLLM_*"]`` is the env var;
an attribute read off ``hf_config`` / ``hf_text_config`` / ``text_config`` (or a
``getattr(that, "key")``) is a model config key.

Developer use (needs the wheels; never run by the tests)::

    python -m audit.kb.vllm_extract.raise_sites --out audit/kb/data/vllm/raise_sites WHEEL...
    python -m audit.kb.vllm_extract.raise_sites --check audit/kb/data/vllm/raise_sites WHEEL...

``--check`` re-extracts and compares with the shipped file: same count and the same sites.
"""

from __future__ import annotations

import argparse
import ast
import gzip
import json
import re
import string
import sys
from pathlib import Path
from typing import Any

from audit.kb.vllm_extract.source import SourceTree, index_classes, read_options

FORMAT = 1

#: Source prefixes of code a ``vllm serve`` runs before it serves (start-up). Request-time
#: code (serving_*, sampling params), benchmarks, vendored third-party kernels and KV/weight
#: transfer connectors are left out: their errors are not start-up failures.
SCOPE = (
    "vllm/config", "vllm/engine/", "vllm/entrypoints/", "vllm/envs.py", "vllm/utils",
    "vllm/platforms/", "vllm/attention/", "vllm/v1/attention/", "vllm/model_executor/",
    "vllm/models/", "vllm/v1/engine/", "vllm/v1/executor/", "vllm/v1/worker/",
    "vllm/v1/core/kv_cache_utils.py", "vllm/executor/", "vllm/worker/", "vllm/distributed/",
    "vllm/transformers_utils/", "vllm/tool_parsers/", "vllm/reasoning/",
    "vllm/compilation/", "vllm/_custom_ops.py", "vllm/tokenizers/", "vllm/v1/spec_decode/",
    "vllm/parser/", "vllm/lora/",
)
_OUT_OF_SCOPE = ("/serving_", "vllm/distributed/kv_transfer/", "vllm/distributed/ec_transfer/",
                 "vllm/distributed/weight_transfer/", "vllm/entrypoints/pooling/",
                 "/benchmarks/", "vllm/entrypoints/openai/protocol", "/test", "sampling_params",
                 "/ops/")
#: Hole expressions longer than this are cut in the data (they are shown, never evaluated).
_MAX_SOURCE = 240
_HF_HOLDERS = ("hf_config", "hf_text_config", "text_config", "hf_config_dict")
_PERCENT = re.compile(r"%(?:\((\w+)\))?[-#0 +]*(?:\d+|\*)?(?:\.\d+)?[sdrifgxXeEc%]")


def in_scope(path: str) -> bool:
    """True for a source file whose raises can stop a start (:data:`SCOPE`)."""
    return path.startswith(SCOPE) and not any(part in path for part in _OUT_OF_SCOPE)


# --------------------------------------------------------------------------- templates

def _pieces(node: ast.AST, names: dict[str, ast.AST], depth: int = 0) -> list[Any] | None:
    """A message expression as [literal str | ("hole", source)], or None when it is no
    template at all (a bare variable, ``str(e)``): such a message cannot be matched."""
    if depth > 4:
        return None
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        out: list[Any] = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                out.append(str(value.value))
            elif isinstance(value, ast.FormattedValue):
                out.append(("hole", ast.unparse(value.value)))
        return out
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _pieces(node.left, names, depth + 1), _pieces(node.right, names, depth + 1)
        if left is None and right is None:
            return None
        return (left or [("hole", ast.unparse(node.left))]) + \
            (right or [("hole", ast.unparse(node.right))])
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) \
            and isinstance(node.left, ast.Constant) and isinstance(node.left.value, str):
        return _percent(node.left.value, node.right)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and node.func.attr == "format":
        base = _pieces(node.func.value, names, depth + 1)
        if base and all(isinstance(p, str) for p in base):
            return _format("".join(base), node)
        return None
    if isinstance(node, ast.Name) and node.id in names:
        return _pieces(names[node.id], {}, depth + 1)
    return None


def _percent(template: str, args: ast.AST) -> list[Any]:
    values = args.elts if isinstance(args, ast.Tuple) else [args]
    out: list[Any] = []
    index, last = 0, 0
    for match in _PERCENT.finditer(template):
        out.append(template[last:match.start()])
        last = match.end()
        if match.group(0) == "%%":
            out.append("%")
            continue
        if match[1] and isinstance(args, ast.Dict):
            out.append(("hole", match[1]))
        else:
            out.append(("hole", ast.unparse(values[index]) if index < len(values) else "?"))
            index += 1
    out.append(template[last:])
    return out


def _format(template: str, call: ast.Call) -> list[Any] | None:
    keywords = {kw.arg: ast.unparse(kw.value) for kw in call.keywords if kw.arg}
    out: list[Any] = []
    auto = 0
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError:
        return None
    for literal, field, _spec, _conv in parsed:
        out.append(literal)
        if field is None:
            continue
        head = re.split(r"[.\[]", field, maxsplit=1)[0]
        if head == "":
            source = ast.unparse(call.args[auto]) if auto < len(call.args) else "?"
            auto += 1
        elif head.isdigit():
            index = int(head)
            source = ast.unparse(call.args[index]) if index < len(call.args) else "?"
        else:
            source = keywords.get(head, head)
        out.append(("hole", source))
    return out


def to_pattern(pieces: list[Any]) -> tuple[str | None, int, list[str]]:
    """(regex, literal characters, hole sources) of a template (module docstring). Runs of
    whitespace become one space: a matcher collapses the whitespace of a log line first (log
    collectors re-wrap long lines). The pattern is None when the template has fewer than 8
    literal characters (it would match anything)."""
    parts: list[str] = []
    holes: list[str] = []
    literal = 0
    for piece in pieces:
        if isinstance(piece, str):
            literal += len(piece.strip())
            parts.append(re.escape(re.sub(r"\s+", " ", piece)).replace("\\ ", " "))
        else:
            if parts and parts[-1].startswith("(?P<h"):
                continue  # two holes side by side: one group (the split is unknowable)
            parts.append(f"(?P<h{len(holes)}>.+?)")
            holes.append(piece[1][:_MAX_SOURCE])
    if literal < 8:
        return None, literal, holes
    return "".join(parts), literal, holes


# --------------------------------------------------------------------------- settings

class SettingMap:
    """Attribute / name -> setting of one release (module docstring, ``reads``)."""

    def __init__(self, options: dict[str, dict]) -> None:
        self.by_field: dict[str, str] = {}  # "CacheConfig.cache_dtype" -> flag
        self.by_name: dict[str, str] = {}  # "cache_dtype" / "kv_cache_dtype" -> flag
        for flag, record in options.items():
            if not flag.startswith("--"):
                continue
            field = record.get("config_field") or ""
            if "." in field:
                self.by_field[field] = flag
                self.by_name.setdefault(field.split(".")[-1], flag)
            if record.get("dest"):
                self.by_name[record["dest"]] = flag

    def reads(self, node: ast.AST | None, klass: str | None) -> list[str]:
        """Settings an expression reads, in source order, without repeats."""
        found: list[str] = []
        for sub in ast.walk(node) if node is not None else ():
            setting = self._one(sub, klass)
            if setting and setting not in found:
                found.append(setting)
        return found

    def _one(self, node: ast.AST, klass: str | None) -> str | None:
        if isinstance(node, ast.Attribute):
            owner = ast.unparse(node.value)
            if owner.split(".")[-1] == "envs" and node.attr.startswith("VLLM_"):
                return f"env:{node.attr}"
            if owner.split(".")[-1] in _HF_HOLDERS:
                return f"hf:{node.attr}"
            if owner == "self" and klass and f"{klass}.{node.attr}" in self.by_field:
                return self.by_field[f"{klass}.{node.attr}"]
            if owner != "self" or klass:
                return self.by_name.get(node.attr)
        if isinstance(node, ast.Call):
            func = ast.unparse(node.func)
            first = node.args[0] if node.args else None
            if func in ("getattr", "hasattr") and len(node.args) >= 2 \
                    and ast.unparse(node.args[0]).split(".")[-1] in _HF_HOLDERS \
                    and isinstance(node.args[1], ast.Constant):
                return f"hf:{node.args[1].value}"
            if func.endswith(("environ.get", "getenv")) and isinstance(first, ast.Constant) \
                    and str(first.value).startswith("VLLM_"):
                return f"env:{first.value}"
        if isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith("environ") \
                and isinstance(node.slice, ast.Constant) \
                and str(node.slice.value).startswith("VLLM_"):
            return f"env:{node.slice.value}"
        if isinstance(node, ast.Name) and node.id in self.by_name and node.id != "model":
            return self.by_name[node.id]
        return None


# --------------------------------------------------------------------------- walking

def _message_node(node: ast.AST) -> tuple[str | None, ast.AST | None]:
    """(exception class, message expression) of a raise / assert / parser.error node."""
    if isinstance(node, ast.Raise) and node.exc is not None:
        exc = node.exc
        if isinstance(exc, ast.Call):
            name = ast.unparse(exc.func).split(".")[-1]
            message = exc.args[0] if exc.args else next(
                (kw.value for kw in exc.keywords if kw.arg in ("msg", "message")), None)
            return name, message
        if isinstance(exc, (ast.Name, ast.Attribute)):
            name = ast.unparse(exc).split(".")[-1]
            return (name, None) if name[:1].isupper() else (None, None)
    if isinstance(node, ast.Assert):
        return "AssertionError", node.msg
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and node.func.attr == "error" and ast.unparse(node.func.value).endswith("parser") \
            and node.args:
        return "SystemExit", node.args[0]
    return None, None


def _assigned_strings(func: ast.AST, before: int) -> dict[str, ast.AST]:
    """Names bound to a message before line ``before`` in ``func`` (the last binding wins):
    ``msg = f"..."; raise ValueError(msg)``."""
    names: dict[str, tuple[int, ast.AST]] = {}
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name) and node.lineno < before:
            known = names.get(node.targets[0].id)
            if known is None or known[0] < node.lineno:
                names[node.targets[0].id] = (node.lineno, node.value)
    return {k: v for k, (_, v) in names.items()}


def _walk(node: ast.AST, stack: list[ast.AST], out: list[tuple[ast.AST, list[ast.AST]]]
          ) -> None:
    for child in ast.iter_child_nodes(node):
        kind, _message = _message_node(child)
        if kind is not None:
            out.append((child, list(stack)))
        _walk(child, [*stack, child], out)


def _guard(node: ast.AST, stack: list[ast.AST]) -> ast.AST | None:
    """The condition that leads to ``node``: an assert's test, else the innermost enclosing
    ``if`` (``not (test)`` for its else branch)."""
    if isinstance(node, ast.Assert):
        return node.test
    inner = node
    for parent in reversed(stack):
        if isinstance(parent, ast.If):
            if any(inner is s for s in parent.orelse):
                return ast.UnaryOp(op=ast.Not(), operand=parent.test)
            return parent.test
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return None
        inner = parent
    return None


def _owner(stack: list[ast.AST]) -> tuple[str | None, str, ast.AST | None]:
    klass = next((n.name for n in reversed(stack) if isinstance(n, ast.ClassDef)), None)
    func = next((n for n in reversed(stack)
                 if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    name = ".".join(p for p in (klass, func.name if func else "<module>") if p)
    return klass, name, func


def file_sites(path: str, module: ast.Module, settings: SettingMap) -> list[dict[str, Any]]:
    """Every raise site of one parsed file (module docstring shape), in source order."""
    found: list[tuple[ast.AST, list[ast.AST]]] = []
    _walk(module, [module], found)
    sites = []
    for node, stack in found:
        exc, message = _message_node(node)
        if message is None:
            continue  # nothing to match a log line with (a bare ``assert x``)
        klass, function, func = _owner(stack)
        names = _assigned_strings(func, node.lineno) if func is not None else {}
        pieces = _pieces(message, names) if message is not None else None
        pattern, literal, holes = to_pattern(pieces) if pieces else (None, 0, [])
        if pattern is None:
            continue
        guard = _guard(node, stack)
        reads = settings.reads(guard, klass)
        if isinstance(message, ast.Name) and message.id in names:
            message = names[message.id]
        for setting in settings.reads(message, klass):
            if setting not in reads:
                reads.append(setting)
        sites.append({"exc": exc, "pattern": pattern, "literal": literal, "holes": holes,
                      "at": f"{path}:{node.lineno}", "function": function,
                      "guard": ast.unparse(guard)[:_MAX_SOURCE] if guard is not None else None,
                      "reads": reads})
    return sites


_REGISTRY = "vllm/model_executor/models/registry.py"


def architectures(src: SourceTree) -> list[str]:
    """Model architectures the release serves: the string keys of the ``*_MODELS`` dicts of
    its model registry (``"LlamaForCausalLM": ("llama", "LlamaForCausalLM")``); a start on
    any other fails with "Model architectures [...] are not supported"."""
    module = src.tree(_REGISTRY)
    found: set[str] = set()
    for node in module.body if module else []:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Dict):
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            if isinstance(target, ast.Name) and target.id.endswith("_MODELS"):
                found |= {k.value for k in node.value.keys
                          if isinstance(k, ast.Constant) and isinstance(k.value, str)}
    return sorted(found)


def extract_sites(location: Path) -> dict[str, Any]:
    """{release, format, count, sites, architectures, provenance} of one wheel / source
    tree. Raises FileNotFoundError when ``location`` holds no vLLM sources."""
    src = SourceTree(location)
    classes, aliases = index_classes(src)
    settings = SettingMap(read_options(src, classes, aliases))
    sites: list[dict[str, Any]] = []
    for path in sorted(p for p in src.files if in_scope(p)):
        module = src.tree(path)
        if module is not None:
            sites += file_sites(path, module, settings)
    return {"format": FORMAT, "release": src.version(), "count": len(sites), "sites": sites,
            "architectures": architectures(src),
            "provenance": {"read_by": "audit.kb.vllm_extract.raise_sites (ast)",
                           "file": location.name}}


# --------------------------------------------------------------------------- files

def write(data: dict[str, Any], out: Path) -> Path:
    """``out/<release>.json.gz`` (compact JSON, gzip with a fixed mtime: reproducible)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{data['release']}.json.gz"
    body = json.dumps(data, separators=(",", ":"), sort_keys=True).encode("utf-8")
    path.write_bytes(gzip.compress(body, mtime=0))
    return path


def read(path: Path) -> dict[str, Any]:
    """A shipped raise-site file (FileNotFoundError when absent)."""
    return json.loads(gzip.decompress(path.read_bytes()))


def compare(shipped: dict[str, Any], fresh: dict[str, Any]) -> list[str]:
    """Differences between a shipped file and a re-extraction (empty: they agree)."""
    out = []
    if shipped.get("architectures") != fresh.get("architectures"):
        out.append("architectures differ")
    if shipped["count"] != fresh["count"]:
        out.append(f"count {shipped['count']} shipped, {fresh['count']} re-extracted")
    old = {json.dumps(s, sort_keys=True) for s in shipped["sites"]}
    new = {json.dumps(s, sort_keys=True) for s in fresh["sites"]}
    out += [f"only shipped: {s[:200]}" for s in sorted(old - new)[:10]]
    out += [f"only re-extracted: {s[:200]}" for s in sorted(new - old)[:10]]
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m audit.kb.vllm_extract.raise_sites")
    parser.add_argument("sources", nargs="+", help="vLLM wheels or unpacked source dirs")
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--out", help="folder to write <release>.json.gz to")
    group.add_argument("--check", help="folder of shipped files to compare with")
    args = parser.parse_args(argv)
    failed = 0
    for source in args.sources:
        data = extract_sites(Path(source))
        if args.out:
            print(f"wrote {write(data, Path(args.out))} ({data['count']} sites)")
            continue
        diffs = compare(read(Path(args.check) / f"{data['release']}.json.gz"), data)
        print(f"{data['release']}: {'ok' if not diffs else 'DIFFERS'} ({data['count']} sites)")
        for line in diffs:
            print(f"    {line}")
        failed += bool(diffs)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
