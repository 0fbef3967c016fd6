"""Read one vLLM release's facts statically from a wheel or an unpacked source tree.

Nothing from vLLM is imported or executed: the Python sources are parsed with :mod:`ast`.
What is read, and where (vLLM's own layout, 0.8.5 -> 0.33.0):

* options: ``add_argument`` calls in ``vllm/engine/arg_utils.py`` and the frontend
  ``cli_args.py`` files, wherever the release keeps them (:func:`arg_files`).
  ``**x_kwargs["field"]`` (``x_kwargs = get_kwargs(SomeConfig)``)
  and ``for key, value in get_kwargs(Cls).items(): add_argument(...)`` loops take the type,
  default and choices of the config dataclass field, following ``_compute_kwargs``: a
  dataclass type -> ``json(Class)``; ``bool | str | None`` -> ``str?``; bool ->
  BooleanOptionalAction; Literal -> choices; list/tuple -> ``list[T]`` (nargs ``+``); int
  (``max_model_len`` -> ``int(human-readable|auto)``, the human-readable set); float; dict
  (+str -> ``json|str``); else str. ``--no-x`` for BooleanOptionalAction, and the
  ``--enable-x``/``--disable-x`` pair where ``argparse_utils`` has ``EnableDisableAction``.
* batch defaults: the ``if``/``elif`` branches of ``get_batch_defaults`` /
  ``_set_default_args[_v1]`` assigning ``default_max_num_batched_tokens`` /
  ``default_max_num_seqs``; conditions kept as source (``not (...)`` for earlier branches).
* config defaults: literal defaults of ``CacheConfig``, ``SchedulerConfig``, ``ModelConfig``.
* speculative methods: the ``Literal`` behind ``SpeculativeConfig.method``.
* metrics: every ``vllm:`` metric declared in ``vllm/`` (constructor calls, helpers, loops
  and dicts of definitions; :mod:`audit.kb.vllm_extract.metrics`).

Where a pattern is not found the part is left empty (the result is checked against the
ground truth in a developer script before a table is committed).
"""

from __future__ import annotations

import ast
import re
import zipfile
from pathlib import Path
from typing import Any

from audit.kb.vllm_extract import metrics

_HUMAN_INTS = {"max_num_batched_tokens", "max_num_scheduled_tokens", "kv_cache_memory_bytes",
               "safetensors_prefetch_block_size", "max_num_queued_tokens"}
#: Where a release's ``vllm serve`` options are declared: the engine's ``arg_utils.py`` and
#: every frontend ``cli_args.py`` (``vllm/entrypoints/openai/`` up to 0.31,
#: ``vllm/entrypoints/launchers/`` from 0.32, ``common/``), plus the serve subcommand.
_ARG_FILE = re.compile(r"^vllm/(?:engine/arg_utils|entrypoints/(?:[\w/]+/)?cli_args|"
                       r"entrypoints/cli/serve)\.py$")


class SourceTree:
    """Python sources of one vLLM release: ``{relative path: text}`` from a wheel (.whl, a
    zip) or a directory holding ``vllm/``. Raises FileNotFoundError when neither."""

    def __init__(self, location: Path) -> None:
        self.files: dict[str, str] = {}
        if location.is_file() and zipfile.is_zipfile(location):
            with zipfile.ZipFile(location) as wheel:
                for name in wheel.namelist():
                    if name.startswith("vllm/") and name.endswith(".py"):
                        self.files[name] = wheel.read(name).decode("utf-8", "replace")
        elif (location / "vllm").is_dir():
            for path in (location / "vllm").rglob("*.py"):
                self.files[path.relative_to(location).as_posix()] = path.read_text("utf-8")
        if not self.files:
            raise FileNotFoundError(f"no vllm/*.py sources in {location}")
        self._trees: dict[str, ast.Module] = {}

    def tree(self, path: str) -> ast.Module | None:
        if path not in self.files:
            return None
        if path not in self._trees:
            try:
                self._trees[path] = ast.parse(self.files[path])
            except SyntaxError:
                self._trees[path] = ast.Module(body=[], type_ignores=[])
        return self._trees[path]

    def version(self) -> str | None:
        text = self.files.get("vllm/_version.py", "")
        match = re.search(r"(?:__version__|version)\s*(?::\s*\w+\s*)?=\s*['\"]([^'\"]+)", text)
        return match[1] if match else None


# --------------------------------------------------------------------------- dataclasses

def _literal(node: ast.AST | None) -> Any:
    if node is None:
        return None
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return f"<expr: {ast.unparse(node)}>"


def _field_default(value: ast.AST | None) -> Any:
    """``x: int = 3`` -> 3; ``field(default=3)`` -> 3; factories -> ``<expr: …>``."""
    if isinstance(value, ast.Call) and ast.unparse(value.func).split(".")[-1] in ("field",
                                                                                   "Field"):
        for kw in value.keywords:
            if kw.arg == "default":
                return _literal(kw.value)
            if kw.arg == "default_factory":
                return _factory(kw.value)
        return None
    return _literal(value)


_EMPTY_FACTORIES = {"list": [], "dict": {}, "set": [], "tuple": []}


def _factory(node: ast.AST) -> Any:
    """``default_factory=list`` -> [] (argparse shows the empty value); else an expression."""
    text = ast.unparse(node)
    if text in _EMPTY_FACTORIES:
        return _EMPTY_FACTORIES[text]
    if isinstance(node, ast.Lambda):
        value = _literal(node.body)
        if not (isinstance(value, str) and value.startswith("<expr")):
            return value
    return f"<expr: {text}()>"


def index_classes(src: SourceTree) -> tuple[dict[str, dict], dict[str, ast.AST]]:
    """(classes, aliases): {ClassName: {"bases": [...], "fields": {name: (annotation node,
    default)}}} for every class with annotated fields, and module-level type aliases."""
    classes: dict[str, dict] = {}
    aliases: dict[str, ast.AST] = {}
    for path in src.files:
        if not path.startswith(("vllm/config", "vllm/engine/", "vllm/entrypoints/")):
            continue
        module = src.tree(path)
        for node in module.body if module else []:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                    and isinstance(node.targets[0], ast.Name):
                aliases.setdefault(node.targets[0].id, node.value)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                    and node.value is not None and "TypeAlias" in ast.unparse(node.annotation):
                aliases.setdefault(node.target.id, node.value)
            elif isinstance(node, ast.ClassDef):
                fields = {n.target.id: (n.annotation, _field_default(n.value))
                          for n in node.body if isinstance(n, ast.AnnAssign)
                          and isinstance(n.target, ast.Name) and not n.target.id.startswith("_")
                          and "ClassVar" not in ast.unparse(n.annotation)}
                if fields:
                    classes.setdefault(node.name, {"bases": [ast.unparse(b) for b in node.bases],
                                                   "fields": fields})
    return classes, aliases


def class_fields(classes: dict[str, dict], name: str) -> dict[str, tuple]:
    """Fields of ``name`` including its bases (base first, subclass overrides)."""
    if name not in classes:
        return {}
    out: dict[str, tuple] = {}
    for base in classes[name]["bases"]:
        out.update(class_fields(classes, base.split(".")[-1]))
    out.update(classes[name]["fields"])
    return out


def _hint_names(node: ast.AST, aliases: dict[str, ast.AST], depth: int = 0) -> list[Any]:
    """Flatten an annotation into names / ("Literal", values) / ("list", inner names)."""
    if depth > 6 or node is None:
        return []
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            return _hint_names(ast.parse(node.value, mode="eval").body, aliases, depth + 1)
        except SyntaxError:
            return [node.value]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _hint_names(node.left, aliases, depth) + _hint_names(node.right, aliases, depth)
    if isinstance(node, ast.Subscript):
        head = ast.unparse(node.value).split(".")[-1]
        inner = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if head == "Literal":
            values: list[Any] = []
            for element in inner:
                if isinstance(element, ast.Constant):
                    values.append(element.value)
                else:  # a nested Literal alias: Literal["auto", ConvertType]
                    values += [v for h in _hint_names(element, aliases, depth + 1)
                               if isinstance(h, tuple) and h[0] == "Literal" for v in h[1]]
            return [("Literal", values)]
        if head in ("Optional", "Union"):
            return [h for e in inner for h in _hint_names(e, aliases, depth + 1)]
        if head in ("Annotated", "SkipValidation", "Final"):
            return _hint_names(inner[0], aliases, depth + 1)
        if head in ("list", "List", "tuple", "Tuple", "set", "Sequence"):
            names = [h for e in inner for h in _hint_names(e, aliases, depth + 1)
                     if h != "..."]
            return [("list", names)]
        return [head]
    name = ast.unparse(node).split(".")[-1]
    if name in aliases and depth < 6:
        return _hint_names(aliases[name], aliases, depth + 1)
    return [name]


def field_kwargs(name: str, annotation: ast.AST, default: Any, classes: dict,
                 aliases: dict) -> dict[str, Any]:
    """The argparse facts ``_compute_kwargs`` derives from one dataclass field."""
    hints = _hint_names(annotation, aliases)
    plain = {h for h in hints if isinstance(h, str)}
    out: dict[str, Any] = {"default": default}
    dataclass = next((h for h in plain if h in classes and h not in ("str", "int")), None)
    literals = [v for h in hints if isinstance(h, tuple) and h[0] == "Literal" for v in h[1]]
    lists = [h for h in hints if isinstance(h, tuple) and h[0] == "list"]
    if dataclass and dataclass.endswith(("Config", "Args")):
        out["type"] = f"json({dataclass})"
    elif plain >= {"bool", "str"} and plain <= {"bool", "str", "None"}:
        out.update(type="str?", nargs="?", const=True)
    elif "bool" in plain:
        out.update(type="bool", action="BooleanOptionalAction")
    elif literals and not lists:
        out.update(type="str", choices=[str(v) for v in literals])
        if "None" in plain:
            out["choices"].append("None")
    elif lists:
        inner = [h for h in lists[0][1] if isinstance(h, str)]
        out.update(type=f"list[{inner[0] if inner else 'str'}]", nargs="+")
    elif "int" in plain:
        out["type"] = "int(human-readable|auto)" if name == "max_model_len" else \
            "int(human-readable)" if name in _HUMAN_INTS else "int"
    elif "float" in plain:
        out["type"] = "float"
    elif plain & {"dict", "Dict"}:
        out["type"] = "json|str" if "str" in plain or (plain - {"dict", "Dict", "None", "Any"}) \
            else "json"
    else:
        out["type"] = "str"
    return out


# --------------------------------------------------------------------------- options

def _kwargs_sources(func: ast.AST) -> dict[str, str]:
    """``model_kwargs = get_kwargs(ModelConfig)`` -> {"model_kwargs": "ModelConfig"}."""
    found = {}
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) \
                and ast.unparse(node.value.func).endswith("get_kwargs") and node.value.args:
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = ast.unparse(node.value.args[0]).split(".")[-1]
    return found


def _explicit(call: ast.Call) -> dict[str, Any]:
    """Explicit keyword arguments of an add_argument call, as facts."""
    out: dict[str, Any] = {}
    for kw in call.keywords:
        if kw.arg is None:
            continue
        text = ast.unparse(kw.value)
        if kw.arg == "action":
            out["action"] = text.split(".")[-1].strip("'\"")
        elif kw.arg == "type":
            out["type"] = {"int": "int", "float": "float", "str": "str",
                           "json.loads": "json"}.get(text, f"str(custom: {text[:40]})")
        elif kw.arg in ("default", "choices", "nargs", "const", "deprecated", "dest"):
            out[kw.arg] = _literal(kw.value)
    return out


def _finish(record: dict[str, Any]) -> dict[str, Any]:
    action, nargs = record.get("action"), record.get("nargs")
    if isinstance(record.get("choices"), list):  # the ground truth's order: sorted, None last
        values = [str(c) for c in record["choices"]]
        record["choices"] = sorted(v for v in values if v != "None") + \
            (["None"] if "None" in values else [])
    if action == "store_true":
        record["type"] = "flag(store_true)"
        record["default"] = record.get("default") or False
    elif action == "BooleanOptionalAction":
        record["type"] = "bool"
    elif action == "append":
        record["type"] = f"append[{record.get('type', 'str')}]"
    elif nargs == "+" and not str(record.get("type", "")).startswith("list["):
        record["type"] = f"list[{record.get('type', 'str')}]"
    elif nargs == "?" and record.get("type", "str") == "str":
        record["type"] = "str?"
    record.setdefault("type", "str")
    record["deprecated"] = bool(record.get("deprecated"))
    return record


def _spellings(call: ast.Call, loop_var: str | None) -> list[str]:
    names = []
    for arg in call.args:
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            names.append(arg.value)
        elif isinstance(arg, ast.JoinedStr) and loop_var:
            names.append("{loop}")
    return names


def arg_files(src: SourceTree) -> list[str]:
    """The files declaring ``vllm serve`` options in this release (:data:`_ARG_FILE`), the
    engine's first (an option declared twice keeps its engine record)."""
    found = sorted(p for p in src.files if _ARG_FILE.match(p))
    return sorted(found, key=lambda p: not p.startswith("vllm/engine/"))


def read_options(src: SourceTree, classes: dict, aliases: dict) -> dict[str, dict]:
    """Every ``vllm serve`` option: {"--flag": record} (ground-truth record shape)."""
    options: dict[str, dict] = {}
    inverse = "_inverse_prefixes" in src.files.get("vllm/utils/argparse_utils.py", "")
    for path in arg_files(src):
        module = src.tree(path)
        if module is None:
            continue
        custom = _customisations(module)
        for owner, func in _functions(module):
            sources = {**_kwargs_sources(func), "__custom__": custom}
            for holder, klass in list(sources.items()):
                if klass in ("cls", "self") and owner:  # get_kwargs(cls): the subclasses
                    sources[holder] = _most_derived(classes, owner)
            _read_calls(func, sources, classes, aliases, options, None)
            for loop in [n for n in ast.walk(func) if isinstance(n, ast.For)]:
                _read_loop(loop, sources, classes, aliases, options)
    for flag, record in options.items():
        if record["type"] == "bool":
            record["negative_forms"] = _negatives(flag, record, inverse)
    return options


def _customisations(module: ast.Module) -> dict[str, dict[str, Any]]:
    """Edits of get_kwargs() results (``_customize_cli_kwargs`` from 0.2x, inline in
    ``make_arg_parser`` before): ``kw["field"]["type"] = json.loads``, ``del
    kw["field"]["nargs"]`` -> {field: {"type": "json.loads", "nargs": None}}."""
    found: dict[str, dict[str, Any]] = {}
    for func in [n for n in ast.walk(module) if isinstance(n, ast.FunctionDef)]:
        for node in ast.walk(func):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else []
            for target in targets:
                if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Subscript):
                    field, key = _literal(target.value.slice), _literal(target.slice)
                    value = ast.unparse(node.value) if isinstance(node, ast.Assign) else None
                    if isinstance(field, str) and isinstance(key, str):
                        found.setdefault(field, {})[key] = value
    return found


def _customised(record: dict[str, Any], edits: dict[str, Any]) -> dict[str, Any]:
    if not edits:
        return record
    if edits.get("type") == "json.loads":
        record["type"] = "json"
    if "nargs" in edits and edits["nargs"] is None:
        record.pop("nargs", None)
        if str(record.get("type", "")).startswith("list["):
            record["type"] = "json" if edits.get("type") == "json.loads" else "str"
    action = edits.get("action")
    if action in ("'append'", '"append"'):
        inner = str(record.get("type", "str"))
        inner = inner[5:-1] if inner.startswith("list[") else inner
        record.pop("nargs", None)
        record.update(action="append", type=f"append[{inner}]")
    elif action:
        record["action"] = "custom"
    return record


def _functions(module: ast.Module) -> list[tuple[str | None, ast.FunctionDef]]:
    """(enclosing class name or None, function) for every function of a module."""
    found: list[tuple[str | None, ast.FunctionDef]] = []
    for node in module.body:
        if isinstance(node, ast.ClassDef):
            found += [(node.name, f) for f in ast.walk(node) if isinstance(f, ast.FunctionDef)]
        elif isinstance(node, ast.FunctionDef):
            found += [(None, f) for f in ast.walk(node) if isinstance(f, ast.FunctionDef)]
    return found


def _most_derived(classes: dict, base: str) -> str:
    """The class served by ``vllm serve`` among ``base`` and its subclasses: the one named
    ``FrontendArgs`` when present, else the first direct subclass, else ``base``."""
    subclasses = [n for n, c in classes.items() if base in [b.split(".")[-1]
                                                            for b in c["bases"]]]
    if "FrontendArgs" in subclasses:
        return "FrontendArgs"
    return subclasses[0] if subclasses else base


def _negatives(flag: str, record: dict, inverse: bool) -> list[str]:
    longs = [flag] + [a for a in record.get("aliases", []) if a.startswith("--")]
    found = ["--no-" + s[2:] for s in longs]
    if inverse:
        for s in longs:
            for prefix, other in (("--enable-", "--disable-"), ("--disable-", "--enable-")):
                if s.startswith(prefix):
                    found.append(other + s[len(prefix):])
    return sorted(found)


def _record_for(call: ast.Call, sources: dict, classes: dict, aliases: dict,
                field_name: str | None = None) -> dict[str, Any] | None:
    record: dict[str, Any] = {}
    keywords = list(call.keywords)
    for kw in call.keywords:  # **{**x_kwargs["field"], "default": None}
        if kw.arg is None and isinstance(kw.value, ast.Dict):
            keywords.remove(kw)
            for key, value in zip(kw.value.keys, kw.value.values, strict=False):
                keywords.append(ast.keyword(arg=None if key is None else _literal(key),
                                            value=value))
    call = ast.Call(func=call.func, args=call.args, keywords=keywords)
    for kw in call.keywords:
        if kw.arg is None and isinstance(kw.value, ast.Subscript):
            holder = ast.unparse(kw.value.value)
            key = _literal(kw.value.slice)
            fields = class_fields(classes, sources.get(holder, ""))
            if isinstance(key, str) and key in fields:
                record.update(field_kwargs(key, *fields[key], classes, aliases))
                record["config_field"] = f"{sources[holder]}.{key}"
        elif kw.arg is None and field_name is not None:
            holder_fields = class_fields(classes, sources.get("__loop__", ""))
            if field_name in holder_fields:
                record.update(field_kwargs(field_name, *holder_fields[field_name],
                                           classes, aliases))
    record.update(_explicit(call))
    return _finish(record)


def _add(options: dict, names: list[str], record: dict) -> None:
    longs = [n for n in names if n.startswith("--")]
    if not names:
        return
    primary = longs[0] if longs else names[0]
    if not primary.startswith("-"):
        record["dest"], primary = primary, primary  # positional (model_tag)
    record.setdefault("dest", primary.lstrip("-").replace("-", "_"))
    aliases = [n for n in names if n != primary]
    if aliases:
        record["aliases"] = aliases
    options[primary] = record


def _read_calls(func: ast.AST, sources: dict, classes: dict, aliases: dict, options: dict,
                loop_var: str | None) -> None:
    for node in ast.walk(func):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "add_argument":
            names = _spellings(node, loop_var)
            if names and "{loop}" not in names:
                _add(options, names, _record_for(node, sources, classes, aliases))


def _read_literal_loop(loop: ast.For, options: dict) -> None:
    """``for arg, type in [("--x", str), …]: add_argument(arg, type=type, deprecated=True)``
    (0.11's deprecated guided-decoding options)."""
    if not (isinstance(loop.iter, (ast.List, ast.Tuple)) and isinstance(loop.target, ast.Tuple)):
        return
    names = [t.id for t in loop.target.elts if isinstance(t, ast.Name)]
    calls = [n for n in ast.walk(loop) if isinstance(n, ast.Call)
             and isinstance(n.func, ast.Attribute) and n.func.attr == "add_argument"]
    if not calls or len(names) != len(loop.target.elts):
        return
    for row in loop.iter.elts:
        if not isinstance(row, ast.Tuple) or len(row.elts) != len(names):
            continue
        bound = {n: ast.unparse(v) for n, v in zip(names, row.elts, strict=True)}
        flag = _literal(row.elts[0])
        if not (isinstance(flag, str) and flag.startswith("-")):
            continue
        record = _explicit(calls[0])
        for kw in calls[0].keywords:
            if kw.arg == "type" and ast.unparse(kw.value) in bound:
                kind = bound[ast.unparse(kw.value)]
                record["type"] = {"str": "str", "int": "int", "float": "float",
                                  "bool": "bool(value)"}.get(kind, f"str(custom: {kind})")
        options.setdefault(flag, {**_finish(record),
                                  "dest": flag.lstrip("-").replace("-", "_")})


def _read_loop(loop: ast.For, sources: dict, classes: dict, aliases: dict,
               options: dict) -> None:
    """``for key, value in x_kwargs.items(): add_argument(f"--{key…}", **value)``."""
    _read_literal_loop(loop, options)
    iterated = ast.unparse(loop.iter)
    holder = iterated.removesuffix(".items()")
    klass = sources.get(holder)
    if klass is None:
        match = re.match(r"get_kwargs\((\w+)\)\.items\(\)", iterated)
        klass = match[1] if match else None
    if klass is None or not isinstance(loop.target, ast.Tuple):
        return
    calls = [n for n in ast.walk(loop) if isinstance(n, ast.Call)
             and isinstance(n.func, ast.Attribute) and n.func.attr == "add_argument"
             and any(isinstance(a, ast.JoinedStr) for a in n.args)]
    if not calls:
        return
    skipped = {c.value for n in ast.walk(loop) if isinstance(n, ast.Compare)
               for c in ast.walk(n) if isinstance(c, ast.Constant) and isinstance(c.value, str)}
    custom = sources.get("__custom__", {})
    for name in class_fields(classes, klass):
        if name in skipped:
            continue
        record = _record_for(calls[0], {**sources, "__loop__": klass}, classes, aliases, name)
        record = _customised(record, custom.get(name, {}))
        record["config_field"] = f"{klass}.{name}"
        flag = "--" + name.replace("_", "-")
        options.setdefault(flag, {**record, "dest": record.get("dest", name)})


# --------------------------------------------------------------------------- batch defaults

_BATCH_FUNCS = ("get_batch_defaults", "_set_default_args_v1", "_set_default_args")
_TARGETS = ("default_max_num_batched_tokens", "default_max_num_seqs")


def _usage_dict(node: ast.AST) -> Any:
    """``{UsageContext.LLM_CLASS: 16384, …}`` -> {"LLM_CLASS": 16384, …}; an int stays."""
    if isinstance(node, ast.Dict):
        return {ast.unparse(k).split(".")[-1]: (_literal(v) if not isinstance(_literal(v), str)
                                                else ast.unparse(v))
                for k, v in zip(node.keys, node.values, strict=False) if k is not None}
    value = _literal(node)
    return value if isinstance(value, int) else ast.unparse(node)


def _branches(body: list[ast.stmt], conditions: list[str], function: str,
              rows: list[dict]) -> None:
    found: dict[str, Any] = {}
    for stmt in body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 \
                and ast.unparse(stmt.targets[0]) in _TARGETS:
            name = ast.unparse(stmt.targets[0]).removeprefix("default_")
            found[name] = _usage_dict(stmt.value)
        elif isinstance(stmt, ast.If):
            test = ast.unparse(stmt.test)
            _branches(stmt.body, [*conditions, test], function, rows)
            _branches(stmt.orelse, [*conditions, f"not ({test})"], function, rows)
        elif isinstance(stmt, ast.Try):
            _branches(stmt.body, conditions, function, rows)
    if found:
        rows.append({"function": function, "when": " and ".join(conditions) or "True",
                     **found})


def read_batch(src: SourceTree) -> dict[str, Any]:
    """{table, device_probe}: the default-setting branches and the lines probing the GPU."""
    rows: list[dict] = []
    probe: set[str] = set()
    for path in ("vllm/engine/arg_utils.py",):
        module = src.tree(path)
        for func in [n for n in ast.walk(module) if isinstance(n, ast.FunctionDef)
                     and n.name in _BATCH_FUNCS] if module else []:
            _branches(func.body, [], func.name, rows)
            for node in ast.walk(func):
                if isinstance(node, ast.Assign) and ast.unparse(node).split(" = ")[0] in (
                        "device_memory", "device_name", "chip_name") or \
                        isinstance(node, ast.Assign) and "is_device_capability" in \
                        ast.unparse(node.value):
                    probe.add(ast.unparse(node))
            if rows:
                break
    return {"table": rows, "device_probe": sorted(probe)}


# --------------------------------------------------------------------------- other facts

_CONFIG_FIELDS = ("ModelConfig.max_model_len", "CacheConfig.block_size",
                  "CacheConfig.gpu_memory_utilization", "CacheConfig.enable_prefix_caching",
                  "CacheConfig.cache_dtype", "SchedulerConfig.enable_chunked_prefill")


def read_config_defaults(classes: dict) -> dict[str, Any]:
    out = {}
    for dotted in _CONFIG_FIELDS:
        klass, name = dotted.split(".")
        fields = class_fields(classes, klass)
        out[dotted] = fields[name][1] if name in fields else None
    return out


def read_spec(classes: dict, aliases: dict) -> dict[str, Any]:
    fields = class_fields(classes, "SpeculativeConfig")
    methods: list[Any] = []
    if "method" in fields:
        for hint in _hint_names(fields["method"][0], aliases):
            if isinstance(hint, tuple) and hint[0] == "Literal":
                methods += hint[1]
    return {"methods": sorted({str(m) for m in methods if m is not None}),
            "fields": sorted(fields)}


def read_metrics(src: SourceTree) -> dict[str, dict]:
    """``vllm:`` metrics declared anywhere in ``vllm/`` (shapes read: :mod:`.metrics`):
    {name: {type, labels, exposed_as, scope, default_exported}}."""
    return metrics.read_metrics(src.files, src.tree)


def extract(location: Path, config_classes: tuple[str, ...] = ("CompilationConfig",
                                                                "SpeculativeConfig")) -> dict:
    """All facts of one release (build.build_table's input) from a wheel or source dir.

    Returns {release, flags, batch, metrics, spec, config_keys, provenance}. Raises
    FileNotFoundError when ``location`` holds no vLLM sources."""
    src = SourceTree(location)
    classes, aliases = index_classes(src)
    batch = read_batch(src)
    batch["config_field_defaults"] = read_config_defaults(classes)
    return {
        "release": src.version(), "flags": read_options(src, classes, aliases),
        "batch": batch, "metrics": read_metrics(src), "spec": read_spec(classes, aliases),
        "config_keys": {name: sorted(class_fields(classes, name)) for name in config_classes
                        if name in classes},
        "provenance": {"read_by": "audit.kb.vllm_extract.source (ast)",
                       "file": location.name},
    }
