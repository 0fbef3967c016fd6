"""Turn a ``get_batch_defaults()`` branch condition (Python source) into a JSON tree.

vLLM picks its batch defaults with Python conditions over a few probed values, e.g.
``not (device_memory >= 160 * GiB_bytes) and device_memory >= 70 * GiB_bytes and 'a100'
not in device_name and (not is_gb10)``. The tree keeps only what a GPU description answers:

* ``{"all": [...]}`` / ``{"any": [...]}`` / ``{"not": node}``;
* ``{"memory_gib_at_least": 70}`` (``device_memory >= N * GiB_bytes``);
* ``{"name_contains": "a100"}`` (``'a100' in device_name``, lower-cased device name);
* ``{"capability": [12, 1]}`` (a name bound by ``current_platform.is_device_capability``);
* ``{"platform": "tpu" | "cpu"}`` (``current_platform.is_tpu()`` / ``is_cpu()``);
* ``{"chip_name": "V6E"}`` (TPU chip);
* ``{"unknown": SOURCE}`` for anything else (evaluates to None: not knowable here).

Parsed with :mod:`ast` (never evaluated); :func:`evaluate` walks the tree.
"""

from __future__ import annotations

import ast
import re
from typing import Any

_CAPABILITY_PROBE = re.compile(
    r"^(\w+)\s*=\s*current_platform\.is_device_capability\(\((\d+),\s*(\d+)\)\)")


def probe_bindings(probe_lines: list[str]) -> dict[str, list[int]]:
    """Names bound to a compute capability test: ``is_gb10 = …((12, 1))`` -> {is_gb10: [12, 1]}."""
    found = {}
    for line in probe_lines:
        match = _CAPABILITY_PROBE.match(line.strip())
        if match:
            found[match[1]] = [int(match[2]), int(match[3])]
    return found


def to_tree(source: str, bindings: dict[str, list[int]] | None = None) -> dict[str, Any]:
    """Condition source -> tree (see module docstring). Never raises: odd input -> unknown."""
    try:
        node = ast.parse(source.strip(), mode="eval").body
    except SyntaxError:
        return {"unknown": source}
    return _node(node, bindings or {})


def _node(node: ast.AST, bindings: dict[str, list[int]]) -> dict[str, Any]:
    if isinstance(node, ast.BoolOp):
        key = "all" if isinstance(node.op, ast.And) else "any"
        return {key: [_node(v, bindings) for v in node.values]}
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return {"not": _node(node.operand, bindings)}
    if isinstance(node, ast.Name) and node.id in bindings:
        return {"capability": bindings[node.id]}
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and ast.unparse(node.func.value) == "current_platform":
        platform = {"is_tpu": "tpu", "is_cpu": "cpu", "is_rocm": "rocm", "is_cuda": "cuda"}
        if node.func.attr in platform:
            return {"platform": platform[node.func.attr]}
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        found = _compare(node.left, node.ops[0], node.comparators[0])
        if found is not None:
            return found
    return {"unknown": ast.unparse(node)}


def _compare(left: ast.AST, op: ast.cmpop, right: ast.AST) -> dict[str, Any] | None:
    lhs, rhs = ast.unparse(left), ast.unparse(right)
    if lhs == "device_memory" and isinstance(op, ast.GtE):
        match = re.fullmatch(r"(\d+(?:\.\d+)?) \* GiB_bytes", rhs)
        if match:
            return {"memory_gib_at_least": float(match[1])}
    if rhs == "device_name" and isinstance(left, ast.Constant) and isinstance(left.value, str):
        if isinstance(op, ast.In):
            return {"name_contains": left.value.lower()}
        if isinstance(op, ast.NotIn):
            return {"not": {"name_contains": left.value.lower()}}
    if lhs == "chip_name" and isinstance(op, ast.Eq) and isinstance(right, ast.Constant):
        return {"chip_name": str(right.value)}
    return None


def evaluate(tree: dict[str, Any], gpu: dict[str, Any]) -> bool | None:
    """Evaluate a tree for ``gpu`` = {memory_gib, name, capability [major, minor] | None,
    platform "cuda" | "rocm" | "tpu" | "cpu", chip_name}; None when the answer is unknown
    (Kleene three-valued logic: ``all`` is False as soon as one part is False)."""
    if "all" in tree:
        parts = [evaluate(t, gpu) for t in tree["all"]]
        return False if False in parts else (None if None in parts else True)
    if "any" in tree:
        parts = [evaluate(t, gpu) for t in tree["any"]]
        return True if True in parts else (None if None in parts else False)
    if "not" in tree:
        inner = evaluate(tree["not"], gpu)
        return None if inner is None else not inner
    if "memory_gib_at_least" in tree:
        memory = gpu.get("memory_gib")
        return None if memory is None else memory >= tree["memory_gib_at_least"]
    if "name_contains" in tree:
        name = gpu.get("name")
        return None if name is None else tree["name_contains"] in name.lower()
    if "capability" in tree:
        cap = gpu.get("capability")
        return None if cap is None else list(cap)[:2] == tree["capability"]
    if "platform" in tree:
        return gpu.get("platform", "cuda") == tree["platform"]
    if "chip_name" in tree:
        return gpu.get("chip_name") == tree["chip_name"]
    return None
