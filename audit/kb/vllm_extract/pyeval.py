"""A small three-valued evaluator for vLLM's capability methods, read with :mod:`ast`.

vLLM states what a backend or quantization method can do in short class methods
(``supports_head_size``, ``supports_compute_capability``, ``get_min_capability``,
``_get_backend_priorities``...). :class:`Evaluator` runs such a method body on given
arguments without importing anything: literals, names bound to arguments, class attributes
(through the class's bases), ``DeviceCapability(8, 0)`` (a ``(major, minor)`` tuple),
``capability.major`` / ``.to_int()``, ``current_platform.is_device_capability[_family](x)``
and ``has_device_capability(x)`` against the capability under test, comparisons, boolean
logic, ``if``/``return`` and calls to other methods of the same class. Anything else (a
runtime probe such as "is FlashAttention 3 installed") is :data:`UNKNOWN`, and a branch on an
unknown condition yields a value only when both sides agree. So a result is either what the
source says for every installation, or UNKNOWN ("depends on the installation").
"""

from __future__ import annotations

import ast
import operator
from typing import Any


class _Unknown:
    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN: Any = _Unknown()
_NO_RETURN: Any = object()
_ENUM_HEADS = ("torch", "AttentionType", "AttentionBackendEnum", "MoEActivation", "_Backend",
               "PlatformEnum", "QuantizationMethods", "CacheDType", "FusedMoEActivation")
_CMP = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt,
        ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge}
_BIN = {ast.Mod: operator.mod, ast.Add: operator.add, ast.Sub: operator.sub,
        ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv}


class ClassIndex:
    """``{class name: ClassDef}`` over some modules, with base lookup by the last name part
    (vLLM's class names are unique enough within the folders read)."""

    def __init__(self, modules: list[ast.Module]) -> None:
        self.classes: dict[str, ast.ClassDef] = {}
        for module in modules:
            for node in module.body:
                if isinstance(node, ast.ClassDef):
                    self.classes.setdefault(node.name, node)

    def mro(self, name: str, depth: int = 0) -> list[ast.ClassDef]:
        """The class then its bases, depth first (a simplified MRO; cycles cut at 12)."""
        node = self.classes.get(name)
        if node is None or depth > 12:
            return []
        out = [node]
        for base in node.bases:
            out += [c for c in self.mro(ast.unparse(base).split("[")[0].split(".")[-1],
                                        depth + 1) if c not in out]
        return out

    def method(self, name: str, method: str) -> ast.FunctionDef | None:
        for klass in self.mro(name):
            for node in klass.body:
                if isinstance(node, ast.FunctionDef) and node.name == method:
                    return node
        return None

    def attribute(self, name: str, attr: str) -> ast.AST | None:
        for klass in self.mro(name):
            for node in klass.body:
                if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                        and node.target.id == attr:
                    return node.value
                if isinstance(node, ast.Assign) and any(
                        isinstance(t, ast.Name) and t.id == attr for t in node.targets):
                    return node.value
        return None


class Evaluator:
    """Evaluate methods of ``klass`` (see module docstring). ``capability``: the
    ``(major, minor)`` the platform probes answer for; None leaves them UNKNOWN."""

    def __init__(self, index: ClassIndex | None, klass: str | None,
                 capability: tuple[int, int] | None = None) -> None:
        self.index, self.klass, self.capability = index, klass, capability
        self._depth = 0

    # ------------------------------------------------------------------ entry points

    def call(self, method: str, *args: Any) -> Any:
        """Value of ``klass.method(*args)``; UNKNOWN when undecidable or absent."""
        func = self.index.method(self.klass, method) if self.index and self.klass else None
        if func is None or self._depth > 8:
            return UNKNOWN
        return self.run(func, list(args))

    def run(self, func: ast.FunctionDef, args: list[Any],
            kwargs: dict[str, Any] | None = None) -> Any:
        names = [a.arg for a in func.args.args if a.arg not in ("cls", "self")]
        env = dict(zip(names, args, strict=False))
        defaults = func.args.defaults
        for arg, default in zip(names[len(names) - len(defaults):], defaults, strict=False):
            env.setdefault(arg, self.expr(default, {}))
        env.update(kwargs or {})
        self._depth += 1
        try:
            result = self.body(func.body, env)
        finally:
            self._depth -= 1
        return None if result is _NO_RETURN else result

    # ------------------------------------------------------------------ statements

    def body(self, stmts: list[ast.stmt], env: dict[str, Any]) -> Any:
        for i, stmt in enumerate(stmts):
            if isinstance(stmt, ast.Return):
                return self.expr(stmt.value, env) if stmt.value is not None else None
            if isinstance(stmt, ast.If):
                test, rest = self.truth(self.expr(stmt.test, env)), stmts[i + 1:]
                if test is UNKNOWN:
                    one = self.body(stmt.body + rest, dict(env))
                    two = self.body(stmt.orelse + rest, dict(env))
                    return one if _same(one, two) else UNKNOWN
                return self.body((stmt.body if test else stmt.orelse) + rest, env)
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 \
                    and isinstance(stmt.targets[0], ast.Name):
                env[stmt.targets[0].id] = self.expr(stmt.value, env)
            elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                env[stmt.target.id] = self.expr(stmt.value, env) if stmt.value else UNKNOWN
            elif isinstance(stmt, (ast.Expr, ast.Pass, ast.ImportFrom, ast.Import)):
                continue
            else:
                return UNKNOWN
        return _NO_RETURN

    @staticmethod
    def truth(value: Any) -> Any:
        return UNKNOWN if value is UNKNOWN else bool(value)

    # ------------------------------------------------------------------ expressions

    def expr(self, node: ast.AST | None, env: dict[str, Any]) -> Any:  # noqa: C901, PLR0911
        if node is None:
            return None
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return env.get(node.id, UNKNOWN)
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            out: list[Any] = []
            for element in node.elts:
                value = self.expr(element.value if isinstance(element, ast.Starred)
                                  else element, env)
                if value is UNKNOWN:
                    return UNKNOWN
                out += list(value) if isinstance(element, ast.Starred) else [value]
            return tuple(out) if isinstance(node, ast.Tuple) else out
        if isinstance(node, ast.Attribute):
            return self._attribute(node, env)
        if isinstance(node, ast.Call):
            return self._call(node, env)
        if isinstance(node, ast.BoolOp):
            return self._boolop(node, env)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            value = self.truth(self.expr(node.operand, env))
            return UNKNOWN if value is UNKNOWN else not value
        if isinstance(node, ast.BinOp) and type(node.op) in _BIN:
            left, right = self.expr(node.left, env), self.expr(node.right, env)
            try:
                return UNKNOWN if UNKNOWN in (left, right) else _BIN[type(node.op)](left, right)
            except (TypeError, ZeroDivisionError):
                return UNKNOWN
        if isinstance(node, ast.Compare):
            return self._compare(node, env)
        if isinstance(node, ast.IfExp):
            test = self.truth(self.expr(node.test, env))
            if test is UNKNOWN:
                one, two = self.expr(node.body, env), self.expr(node.orelse, env)
                return one if _same(one, two) else UNKNOWN
            return self.expr(node.body if test else node.orelse, env)
        return UNKNOWN

    def _attribute(self, node: ast.Attribute, env: dict[str, Any]) -> Any:
        head = ast.unparse(node.value)
        if head in _ENUM_HEADS or head.endswith(("AttentionBackendEnum", "MoEActivation")):
            return node.attr  # torch.float16 -> "float16"; AttentionType.DECODER -> "DECODER"
        if head in ("cls", "self") and self.index and self.klass:
            value = self.index.attribute(self.klass, node.attr)
            return self.expr(value, {}) if value is not None else UNKNOWN
        base = self.expr(node.value, env)
        if isinstance(base, tuple) and len(base) == 2 and node.attr in ("major", "minor"):
            return base[0] if node.attr == "major" else base[1]
        return UNKNOWN

    def _call(self, node: ast.Call, env: dict[str, Any]) -> Any:
        func = ast.unparse(node.func)
        args = [self.expr(a, env) for a in node.args]
        last = func.split(".")[-1]
        if last == "DeviceCapability" and len(args) in (1, 2) and UNKNOWN not in args:
            return (args[0], args[1] if len(args) == 2 else 0)
        if last == "to_int" and isinstance(node.func, ast.Attribute):
            base = self.expr(node.func.value, env)
            return base[0] * 10 + base[1] if isinstance(base, tuple) else UNKNOWN
        if last in ("is_device_capability", "is_device_capability_family",
                    "has_device_capability") and self.capability and args \
                and isinstance(args[0], int):
            cc = self.capability[0] * 10 + self.capability[1]
            return {"is_device_capability": cc == args[0],
                    "is_device_capability_family": cc // 10 == args[0] // 10,
                    "has_device_capability": cc >= args[0]}[last]
        if last == "is_quantized_kv_cache" and args and isinstance(args[0], str):
            # vLLM: every cache dtype but the unquantized ones (get_kv_quant_mode != NONE in
            # vllm/v1/kv_cache_interface.py; startswith("fp8")/... in older torch_utils).
            return args[0] not in ("auto", "float16", "bfloat16", "float32")
        if last in ("startswith", "endswith") and isinstance(node.func, ast.Attribute):
            base = self.expr(node.func.value, env)
            if isinstance(base, str) and args and isinstance(args[0], (str, tuple)):
                return getattr(base, last)(args[0])
            return UNKNOWN
        if last == "len" and args and isinstance(args[0], (list, tuple)):
            return len(args[0])
        if func.startswith(("cls.", "self.")) and func.count(".") == 1 \
                and UNKNOWN not in args:
            return self.call(last, *args)
        return UNKNOWN

    def _boolop(self, node: ast.BoolOp, env: dict[str, Any]) -> Any:
        unknown = False
        is_and = isinstance(node.op, ast.And)
        for value_node in node.values:
            value = self.expr(value_node, env)
            truth = self.truth(value)
            if truth is UNKNOWN:
                unknown = True
            elif truth is not is_and:  # and: a False decides; or: a True decides
                return value
        return UNKNOWN if unknown else is_and

    def _compare(self, node: ast.Compare, env: dict[str, Any]) -> Any:
        left = self.expr(node.left, env)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = self.expr(right_node, env)
            if isinstance(op, (ast.Is, ast.IsNot)):
                if left is UNKNOWN or right is UNKNOWN:
                    return UNKNOWN
                result = (left is right) if isinstance(op, ast.Is) else (left is not right)
            elif left is UNKNOWN or right is UNKNOWN:
                return UNKNOWN
            elif isinstance(op, (ast.In, ast.NotIn)):
                try:
                    result = (left in right) == isinstance(op, ast.In)
                except TypeError:
                    return UNKNOWN
            else:
                try:
                    result = _CMP[type(op)](left, right)
                except (TypeError, KeyError):
                    return UNKNOWN
            if not result:
                return False
            left = right
        return True


def _same(one: Any, two: Any) -> bool:
    return one is not UNKNOWN and two is not UNKNOWN and one == two
