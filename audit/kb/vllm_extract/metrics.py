"""Read the ``vllm:`` metrics a release declares, statically (``ast``; vLLM is never imported).

Output: {name: {type, labels, exposed_as, scope, default_exported}}; ``type`` is counter,
gauge or histogram (from the constructor's name: ``Counter``, ``self._gauge_cls``,
``OffloadingHistogramMetadata``...); a counter's name loses a given ``_total`` because
prometheus_client drops it and adds its own.

Declaration shapes read (all seen in vLLM 0.8.5 -> 0.33.0):

* a constructor call with ``name=`` (or a first positional argument) that resolves to a
  ``vllm:`` string: a literal; a module- or class-level constant (``PREFIX + "x"``,
  f-strings with known parts); ``Cls.ATTR`` (resolved by the attribute name over every
  file, the last file in path order winning, as the ground truth reader did); a local
  variable assigned a ``vllm:`` string in the same function (the info-metric helper:
  ``name = "vllm:cache_config_info"``); a loop or comprehension variable unpacked from a
  local list/tuple of ``(name, doc)`` tuples (every assignment of that list counts, as
  both branches of an ``if`` declare metrics);
* a dict literal of metric definitions ``{NAME: XCounterMetadata(...)}``: the key is the
  name, the value's class gives the type.

Labels: a list literal's strings; a local list variable expanded; ``a + ["x"]``
concatenated; ``labelnames=`` or the third positional argument; anything else written
``<source>`` (``<labelnames>`` for a parameter), ``x.keys()`` as ``<keys of x>`` and
``tuple(gen)`` as ``<gen>``; a tuple literal of labels is left empty (as in the ground
truth). When a name has both a constructor call and a dict definition, the call's labels
are kept.

Not derivable statically: an f-string part that is a run-time value stays as ``{expr}``
(0.24-0.25 ``vllm:hisparse_{name}``, a helper ``_metric(name)`` called with names built
elsewhere), so the table keeps the placeholder. The V0 engine's metrics
(``vllm/engine/metrics.py``, up to 0.11) are written ``NAME  [V0]`` to keep them apart
from the V1 metric of the same name.
"""

from __future__ import annotations

import ast
import re
from typing import Any

_KINDS = ("counter", "gauge", "histogram")
#: A file that may declare ``vllm:`` metrics, parsed only when this matches.
_METRIC_FILE = re.compile(r"[\"']vllm:|f[\"']vllm:")
_V0_FILE = "vllm/engine/metrics.py"


def _kind(call: ast.Call) -> str | None:
    func = ast.unparse(call.func).lower()
    return next((k for k in _KINDS if k in func), None)


class _Names:
    """String constants of the files that may declare metrics: module and class level."""

    def __init__(self) -> None:
        self.module: dict[str, dict[str, str]] = {}   # path -> {NAME: value}
        self.attrs: dict[str, str] = {}               # ATTR -> value, last file wins

    def index(self, path: str, module: ast.Module) -> None:
        consts: dict[str, str] = {}
        self.module[path] = consts
        for node in module.body:
            self._assign(node, consts, consts)
            if isinstance(node, ast.ClassDef):
                own: dict[str, str] = {}
                for item in node.body:
                    self._assign(item, own, consts)
                self.attrs.update(own)
                consts.update({f"{node.name}.{k}": v for k, v in own.items()})

    def _assign(self, node: ast.stmt, into: dict, scope: dict) -> None:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                isinstance(node.targets[0], ast.Name):
            target, value = node.targets[0].id, node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                and node.value is not None:
            target, value = node.target.id, node.value
        else:
            return
        text = self.string(value, scope, {})
        if isinstance(text, str):
            into[target] = text

    def string(self, node: ast.AST | None, consts: dict, local: dict) -> Any:
        """The string ``node`` evaluates to, or None; unknown f-string parts as ``{expr}``."""
        if isinstance(node, ast.Constant):
            return node.value if isinstance(node.value, str) else None
        if isinstance(node, ast.Name):
            return local.get(node.id, consts.get(node.id))
        if isinstance(node, ast.Attribute):
            return self.attrs.get(node.attr, consts.get(ast.unparse(node)))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = (self.string(node.left, consts, local),
                           self.string(node.right, consts, local))
            return left + right if isinstance(left, str) and isinstance(right, str) \
                else None
        if isinstance(node, ast.JoinedStr):
            parts = []
            for part in node.values:
                if isinstance(part, ast.FormattedValue):
                    value = self.string(part.value, consts, local)
                    parts.append(value if isinstance(value, str)
                                 else "{" + ast.unparse(part.value) + "}")
                else:
                    parts.append(str(part.value))
            return "".join(parts)
        return None


def _locals(func: ast.AST) -> dict[str, list[ast.AST]]:
    """{variable: [every value assigned to it]} in one function body."""
    out: dict[str, list[ast.AST]] = {}
    for node in ast.walk(func):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    out.setdefault(target.id, []).append(node.value)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                and node.value is not None:
            out.setdefault(node.target.id, []).append(node.value)
    return out


def _loop_values(func: ast.AST, var: str, assigned: dict) -> list[ast.AST]:
    """The values ``var`` takes in ``for ..., var, ... in LIST`` (loops and
    comprehensions) where LIST is a literal or a local list of tuples."""
    values: list[ast.AST] = []
    for node in ast.walk(func):
        pairs = [(node.target, node.iter)] if isinstance(node, ast.For) else \
            [(g.target, g.iter) for g in node.generators] \
            if isinstance(node, (ast.ListComp, ast.DictComp, ast.GeneratorExp, ast.SetComp)) \
            else []
        for target, source in pairs:
            if isinstance(target, ast.Name) and target.id == var:
                index = None
            elif isinstance(target, ast.Tuple) and any(
                    isinstance(e, ast.Name) and e.id == var for e in target.elts):
                index = next(i for i, e in enumerate(target.elts)
                             if isinstance(e, ast.Name) and e.id == var)
            else:
                continue
            lists = assigned.get(source.id, []) if isinstance(source, ast.Name) else [source]
            for seq in lists:
                for item in seq.elts if isinstance(seq, (ast.List, ast.Tuple)) else []:
                    if index is None:
                        values.append(item)
                    elif isinstance(item, ast.Tuple) and index < len(item.elts):
                        values.append(item.elts[index])
    return values


def _labels(node: ast.AST | None, assigned: dict, depth: int = 0) -> list[str]:
    if node is None or isinstance(node, ast.Tuple):
        return []
    if isinstance(node, ast.List):
        return [e.value if isinstance(e, ast.Constant) else f"<{ast.unparse(e)}>"
                for e in node.elts]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _labels(node.left, assigned, depth) + _labels(node.right, assigned, depth)
    if isinstance(node, ast.Name) and node.id in assigned and depth < 3:
        return _labels(assigned[node.id][0], assigned, depth + 1)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
            node.func.attr == "keys":
        return [f"<keys of {ast.unparse(node.func.value)}>"]
    if isinstance(node, ast.Call) and ast.unparse(node.func) in ("tuple", "list") and \
            len(node.args) == 1:  # ``tuple(<generator>)``: the generator's source
        return [f"<{ast.unparse(node.args[0])}>"]
    return [f"<{ast.unparse(node)}>"]


def _record(name: str, kind: str, labels: list[str]) -> tuple[str, dict]:
    if kind == "counter":
        name = name.removesuffix("_total")
    exposed = [f"{name}_total"] if kind == "counter" else \
        [f"{name}_{s}" for s in ("bucket", "sum", "count")] if kind == "histogram" else [name]
    return name, {"type": kind, "labels": labels, "exposed_as": exposed,
                  "scope": "v1_engine", "default_exported": None}


def _scopes(module: ast.Module) -> list[ast.AST]:
    """The module itself and each function: the units local variables are read in."""
    return [module] + [n for n in ast.walk(module)
                       if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _read_scope(scope: ast.AST, names: _Names, consts: dict) -> list[tuple[str, dict, int]]:
    """(name, record, rank) of each declaration in one scope: rank 0 for a constructor
    call, 1 for an entry of a dict of definitions (the call wins when both exist)."""
    assigned = _locals(scope) if not isinstance(scope, ast.Module) else {}
    nodes = ast.walk(scope) if not isinstance(scope, ast.Module) else \
        (n for stmt in scope.body if not isinstance(stmt, (ast.FunctionDef, ast.ClassDef,
                                                            ast.AsyncFunctionDef))
         for n in ast.walk(stmt))
    found = []
    for node in nodes:
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                text = names.string(key, consts, {})
                kind = _kind(value) if isinstance(value, ast.Call) else None
                if isinstance(text, str) and text.startswith("vllm:") and kind:
                    kw = {k.arg: k.value for k in value.keywords if k.arg}
                    found.append((*_record(text, kind, _labels(kw.get("labelnames"), {})),
                                  1))
            continue
        if not isinstance(node, ast.Call) or not (kind := _kind(node)):
            continue
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        arg = kw.get("name") or (node.args[0] if node.args else None)
        labels = kw.get("labelnames") or (node.args[2] if len(node.args) > 2 else None)
        candidates = [arg]
        if isinstance(arg, ast.Name) and not isinstance(scope, ast.Module):
            candidates = assigned.get(arg.id, []) + _loop_values(scope, arg.id, assigned) \
                or [arg]
        for candidate in candidates:
            text = names.string(candidate, consts, {})
            if isinstance(text, str) and text.startswith("vllm:"):
                found.append((*_record(text, kind, _labels(labels, assigned)), 0))
    return found


def read_metrics(files: dict[str, str], tree) -> dict[str, dict]:
    """``files``: {path: source text} of the release; ``tree(path)``: its parsed module
    (None when it does not parse). Returns {name: record}, first declaration wins."""
    paths = sorted(p for p in files if p.endswith(".py") and _METRIC_FILE.search(files[p]))
    names = _Names()
    modules = {}
    for path in paths:
        if (module := tree(path)) is not None:
            modules[path] = module
            names.index(path, module)
    found: dict[str, tuple[int, dict]] = {}
    for path, module in modules.items():
        for scope in _scopes(module):
            for name, record, rank in _read_scope(scope, names, names.module[path]):
                if path.endswith(_V0_FILE):
                    name = f"{name}  [V0]"
                if name not in found or rank < found[name][0]:
                    found[name] = (rank, record)
    return {name: record for name, (_, record) in found.items()}
