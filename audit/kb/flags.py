"""Parse a vLLM server's raw argv into its effective engine configuration.

Two steps, both pure and never raising on odd input:

1. :func:`parse_argv` finds the launcher (``vllm serve MODEL``, ``vllm serve --model``,
   ``python -m vllm.entrypoints.openai.api_server``, ``python -m vllm.entrypoints.cli.main
   serve``, ``/usr/bin/python3 /venv/bin/vllm serve``, ``docker run … IMAGE ARGS``, bare
   ``IMAGE ARGS`` container args, ``vllm bench``) and reads the options with vLLM's rules
   (vllm-facts §4.1): dash/underscore equivalence, ``--flag=value``, ``--no-flag``, short
   aliases, JSON values and their dotted form, ``1k``/``1K`` numbers, last duplicate wins,
   ``REDACTED`` kept as a value, ``<...>`` placeholders kept as unknown (None) values.
2. :func:`effective_flags` fills vLLM's defaults for what argv left unset, per version and GPU,
   and records where every value came from.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from typing import Any

from packaging.version import Version

from audit.kb.flags_defaults import KNOWN_FLAGS, REMOVED_FLAGS, SHORT_ALIASES
from audit.kb.versions import version_tuple

_DOCKER_BINARIES = {"docker", "podman", "nerdctl"}
_DOCKER_NO_VALUE = {
    "-d", "--detach", "-i", "--interactive", "-t", "--tty", "--rm", "--privileged", "--init",
    "-P", "--publish-all", "--read-only", "--sig-proxy", "--oom-kill-disable", "--no-healthcheck",
}
_IMAGE_RE = re.compile(r"^[\w.\-]+(?::\d+)?(?:/[\w.\-]+)+(?::[\w.\-+]+)?(?:@sha256:[0-9a-f]+)?$")
_PYTHON_RE = re.compile(r"^python[\d.]*$")
_TOKENS_RE = re.compile(r"^(\d+(?:\.\d+)?)([kKmMgG]?)$")
_BOOL_WORDS = {"true": True, "false": False, "1": True, "0": False, "yes": True, "no": False}
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
    ``/model`` path holds.
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
    """Convert one option value by its declared kind; bad values are kept as strings."""
    if _is_placeholder(raw):
        return None
    if kind in ("int", "tokens"):
        number = parse_tokens(raw) if kind == "tokens" else _int_or_none(raw)
        if number is None and key == "max_model_len" and raw.lower() in ("-1", "auto"):
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
    if kind in ("bool", "flag"):
        return _BOOL_WORDS.get(raw.lower(), raw)
    if kind == "json":
        return _parse_json_value(raw, key, errors)
    return raw


def _int_or_none(raw: str) -> int | None:
    try:
        return int(raw)
    except ValueError:
        return None


def _parse_json_value(raw: str, key: str, errors: list[str]) -> Any:
    """JSON object, or the legacy ``image=1,video=0`` form; unparseable -> {"_raw": text}."""
    try:
        return json.loads(raw)
    except ValueError:
        pass
    if re.fullmatch(r"[\w.]+=[^,]+(,[\w.]+=[^,]+)*", raw):
        pairs = (item.split("=", 1) for item in raw.split(","))
        return {k: _scalar(v) for k, v in pairs}
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


def _option_key(token: str) -> tuple[str, str | None, str | None]:
    """``--max_model-len.x=3`` -> ("max_model_len", "x", "3"). Short aliases expanded;
    ``-O3`` -> optimization_level 3. Only the part before the first dot is normalised."""
    inline = None
    if "=" in token:
        token, inline = token.split("=", 1)
    if not token.startswith("--"):
        short = token[1:]
        if re.fullmatch(r"O\d", short):
            return "optimization_level", None, short[1:]
        name = SHORT_ALIASES.get(short.split(".", 1)[0], short)
        dotted = short.split(".", 1)[1] if "." in short else None
        return name, dotted, inline
    body = token[2:]
    head, _, dotted = body.partition(".")
    return head.replace("-", "_"), dotted or None, inline


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
        node = node.setdefault(part, {})
    leaf = parts[-1]
    value: Any = None if _is_placeholder(raw) else _scalar(raw)
    if append:
        node.setdefault(leaf, []).extend(_scalar(v) for v in raw.split(","))
    else:
        node[leaf] = value
    parsed.values[key] = target


def _read_option(parsed: ParsedArgv, tokens: list[str], index: int) -> int:
    """Read the option at ``tokens[index]``; return the index of the next unread token."""
    token = tokens[index]
    nxt = tokens[index + 1] if index + 1 < len(tokens) else None
    key, dotted, inline = _option_key(token)
    negated = key.startswith("no_") and KNOWN_FLAGS.get(key[3:]) == "bool"
    kind = KNOWN_FLAGS.get(key[3:] if negated else key)
    if kind is None:
        return _read_unknown(parsed, token, nxt, index)
    if negated:
        _store(parsed, key[3:], False)
        return index + 1
    if dotted is not None and kind == "json":
        if inline is None and not _takes_value(nxt):
            parsed.errors.append(f"{token}: missing value")
            return index + 1
        _read_dotted(parsed, key, dotted, inline if inline is not None else nxt)
        return index + 1 if inline is not None else index + 2
    return _read_typed(parsed, key, kind, inline, tokens, index)


def _read_typed(parsed: ParsedArgv, key: str, kind: str, inline: str | None,
                tokens: list[str], index: int) -> int:
    """Value-carrying option of a known kind; booleans take an optional true/false word."""
    nxt = tokens[index + 1] if index + 1 < len(tokens) else None
    if kind in ("bool", "flag"):
        if inline is not None:
            _store(parsed, key, _convert(kind, inline, key, parsed.errors))
            return index + 1
        if nxt is not None and nxt.lower() in _BOOL_WORDS:
            _store(parsed, key, _BOOL_WORDS[nxt.lower()])  # legacy StoreBoolean nargs='?'
            return index + 2
        _store(parsed, key, True)
        return index + 1
    if kind == "list":
        return _read_list(parsed, key, inline, tokens, index)
    if inline is None and not _takes_value(nxt):
        parsed.errors.append(f"--{key}: missing value")
        return index + 1
    raw = inline if inline is not None else nxt
    value = _convert(kind, raw, key, parsed.errors)
    if value is None:
        parsed.placeholders.append(key)
    if key == "config":
        parsed.config_file = raw
        parsed.errors.append(f"--config {raw}: YAML config file cannot be read here; "
                             "its flags are unknown")
    _store(parsed, key, value)
    return index + 1 if inline is not None else index + 2


def _read_list(parsed: ParsedArgv, key: str, inline: str | None,
               tokens: list[str], index: int) -> int:
    """nargs='+' options: every following token up to the next option."""
    values = [inline] if inline is not None else []
    index += 1
    while inline is None and index < len(tokens) and not tokens[index].startswith("-"):
        values.append(tokens[index])
        index += 1
    if any(_is_placeholder(v) for v in values):
        parsed.placeholders.append(key)
    _store(parsed, key, values)
    return index


def _read_unknown(parsed: ParsedArgv, token: str, nxt: str | None, index: int) -> int:
    """Keep an option we do not know verbatim; guess that a following non-option is its
    value (argparse would have rejected it or it belongs to a newer vLLM)."""
    if "=" not in token and _takes_value(nxt) and not token.startswith("--no-"):
        parsed.unknown.append(f"{token} {nxt}")
        return index + 2
    parsed.unknown.append(token)
    return index + 1


def parse_argv(argv: list[str] | None) -> ParsedArgv:
    """Parse one server process's argv (as in ``/proc/PID/cmdline``); never raises.

    Returns :class:`ParsedArgv`. The ``vllm serve`` positional becomes ``values["model"]``
    unless ``--model`` is also given (vLLM moves ``--model`` to the positional slot); the
    api_server module ignores a positional model (vllm-facts §3.1), noted in ``errors``.
    """
    parsed = ParsedArgv()
    tokens = _split_launcher([str(t) for t in (argv or [])], parsed)
    positional: list[str] = []
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if token.startswith("-") and len(token) > 1 and not _is_placeholder(token):
            index = _read_option(parsed, tokens, index)
        else:
            positional.append(token)
            index += 1
    _apply_positional(parsed, positional)
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


# --------------------------------------------------------------------------- defaults

_V = Version
# The V1 engine became the default in 0.8.0 (case 010: maintainer on vllm#15228).
_V1_DEFAULT = _V("0.8.0")
# GPU-memory-based batch defaults: https://github.com/vllm-project/vllm/pull/17073
# (merged 2025-04-23; first release taken as 0.8.5, approximate) plus the A100 name
# exclusion from PR #17885. Before it, V1 used 1024 seqs on every GPU (cases 010, 011:
# "warming up sampler with 1024 dummy requests" on a 24 GB RTX 4090 with 0.8.2) and 8192
# API-server tokens only on H100/H200 names (https://github.com/vllm-project/vllm/pull/12369).
_MEMORY_RULE = _V("0.8.5")
_UTIL_092 = _V("0.21.0")  # https://github.com/vllm-project/vllm/pull/38284, vllm-facts §4.2


def batch_defaults(version: Version | None, gpu_memory_gib: float | None,
                   gpu_name: str | None) -> tuple[int, int | None, str]:
    """vLLM's default (max_num_seqs, max_num_batched_tokens, rule) for the API server.

    ``gpu_memory_gib``/``gpu_name`` describe device 0 as NVML reports it. Unknown version
    -> the current rule. V0 (< 0.8.0): 256 seqs, tokens None (depends on chunked prefill and
    max_model_len). Current rule (vllm-facts §4.3, ``get_batch_defaults()``): >= 70 GiB and
    name without "a100" -> 1024 / 8192, else 256 / 2048 (also when the GPU is unknown).
    """
    name = (gpu_name or "").lower()
    if version is not None and version < _V1_DEFAULT:
        return 256, None, "V0 engine (< 0.8.0): max_num_seqs 256"
    if version is not None and version < _MEMORY_RULE:
        big = "h100" in name or "h200" in name
        return 1024, 8192 if big else 2048, "V1 0.8.0-0.8.4: 1024 seqs (vllm#15228), " \
            "8192 tokens on H100/H200 names else 2048 (vllm#12369)"
    if gpu_memory_gib is not None and gpu_memory_gib >= 70 and "a100" not in name:
        return 1024, 8192, "get_batch_defaults(): >= 70 GiB and not A100 -> 1024 / 8192"
    reason = "GPU unknown" if gpu_memory_gib is None else "< 70 GiB or A100"
    return 256, 2048, f"get_batch_defaults(): {reason} -> 256 / 2048"


def default_gpu_memory_utilization(version: Version | None) -> tuple[float, str]:
    """0.92 from 0.21.0 (PR #38284), 0.9 before; unknown version -> 0.92 (current)."""
    if version is not None and version < _UTIL_092:
        return 0.9, "default (0.9 before vLLM 0.21.0)"
    if version is None:
        return 0.92, "default (0.92, vLLM >= 0.21.0 assumed: version unknown)"
    return 0.92, "default (0.92 since vLLM 0.21.0, vllm#38284)"


_STATIC_DEFAULTS: dict[str, Any] = {
    "model": None, "served_model_name": None, "tensor_parallel_size": 1,
    "pipeline_parallel_size": 1, "data_parallel_size": 1, "max_model_len": None,
    "kv_cache_dtype": "auto", "quantization": None, "dtype": "auto", "enforce_eager": False,
    "attention_backend": None, "reasoning_parser": None, "tool_call_parser": None,
    "enable_auto_tool_choice": False, "chat_template": None, "revision": None,
    "trust_remote_code": False, "language_model_only": False, "limit_mm_per_prompt": {},
    "speculative_config": None, "default_chat_template_kwargs": None,
    "disable_log_stats": False, "block_size": 16, "port": 8000, "host": None, "uds": None,
    "cpu_offload_gb": 0.0, "swap_space": None, "enable_lora": False,
    "async_scheduling": None, "compilation_config": None, "hf_overrides": None,
    "mm_processor_kwargs": None, "enable_expert_parallel": False, "kv_transfer_config": None,
    "trust_request_chat_template": False, "max_lora_rank": None, "optimization_level": None,
    "generation_config": None, "load_format": None, "tokenizer": None, "seed": None,
    "enable_log_requests": False, "disable_log_requests": False, "enable_reasoning": False,
}
# Why async_scheduling defaults to None: its default changed across releases and is not
# sourced here. swap_space is version dependent (see _version_dependent).
_SWAP_REMOVED = _V("0.18.0")  # vllm#36216; unsloth-zoo#1210 checked every release


def _version_dependent(values: dict[str, Any], version: Version | None) -> dict[str, tuple]:
    """Defaults whose value depends on the engine generation: (value, source)."""
    v1 = version is None or version >= _V1_DEFAULT
    era = "V1 default" if v1 else "V0 default"
    return {
        "enable_prefix_caching": (v1, f"default ({era}: prefix caching {'on' if v1 else 'off'})"),
        "enable_chunked_prefill": (True if v1 else None, f"default ({era})"),
        "performance_mode": ("balanced", "default (balanced; flag from vllm#34936)"),
        "api_server_count": (values.get("data_parallel_size") or 1,
                             "default (= data_parallel_size, vllm-facts §3.2)"),
        "swap_space": (None, "default (flag removed in 0.18.0, vllm#36216)")
        if version is None or version >= _SWAP_REMOVED
        else (4.0, "default (4 GiB CPU swap before 0.18.0; verl#960)"),
    }


def effective_flags(parsed: ParsedArgv, version: str | None, gpu_memory_gib: float | None,
                    gpu_name: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Effective config = argv values + vLLM defaults for the rest.

    Args: ``parsed`` from :func:`parse_argv`; ``version`` normalised PEP 440 (or None);
    ``gpu_memory_gib`` / ``gpu_name`` of the server's first GPU (None when unknown).
    Returns ``(flags, meta)``: ``flags`` has snake_case keys (every key of
    ``_STATIC_DEFAULTS`` plus batch limits, utilisation and everything argv set);
    ``meta`` has ``set``, ``sources`` ({key: "argv" | "default (…)"}), ``unknown``,
    ``removed``, ``launcher``, ``container_image``, ``errors``, ``placeholders``,
    ``duplicates``, ``config_file``, ``is_server``.
    """
    ver = version_tuple(version)
    values = dict(parsed.values)
    invalid = _drop_invalid_numbers(values)
    flags: dict[str, Any] = dict(_STATIC_DEFAULTS)
    sources = {key: "default" for key in _STATIC_DEFAULTS}
    for key, value in values.items():
        flags[key] = value
        sources[key] = "argv"
    for key, (value, source) in _version_dependent(values, ver).items():
        if key not in values:
            flags[key], sources[key] = value, source
    _fill_util(flags, sources, values, ver)
    _fill_batch(flags, sources, values, ver, gpu_memory_gib, gpu_name)
    _normalise(flags, sources, values)
    for key, raw in invalid.items():
        sources[key] = f"{sources.get(key, 'default')}; argv value {str(raw)[:40]!r} ignored " \
                       "(not a usable number: treated as unset)"
    meta = {
        "set": sorted(values), "sources": sources, "unknown": list(parsed.unknown),
        "removed": removed_flags(values, ver), "launcher": parsed.launcher,
        "container_image": parsed.container_image, "errors": list(parsed.errors),
        "placeholders": list(parsed.placeholders), "duplicates": list(parsed.duplicates),
        "config_file": parsed.config_file, "is_server": parsed.is_server,
        "invalid": sorted(invalid),
    }
    meta["errors"] += [f"--{key.replace('_', '-')} {str(raw)[:40]!r}: not a usable number, "
                       "treated as unset" for key, raw in invalid.items()]
    return flags, meta


#: Largest magnitude a numeric flag may have before it is treated as invalid (int64).
_MAX_FLAG_NUMBER = 2**63


def _drop_invalid_numbers(values: dict[str, Any]) -> dict[str, Any]:
    """Remove numeric flags whose value is not a finite number in int64 range (``nan``,
    ``inf``, ``abc``, 10**400) from ``values``; returns them. One poisoned argv value must
    not break the geometry, the pages or the recommendation (issue 16 item 6), so such a
    flag counts as unset (vLLM's default applies) and the context says so."""
    invalid = {}
    for key, value in list(values.items()):
        if KNOWN_FLAGS.get(key) not in ("int", "tokens", "float"):
            continue
        if key == "max_model_len" and value == "auto":
            continue
        usable = isinstance(value, int | float) and not isinstance(value, bool) \
            and math.isfinite(value) and abs(value) < _MAX_FLAG_NUMBER
        if not usable and value is not None:
            invalid[key] = values.pop(key)
    return invalid


def _fill_util(flags: dict, sources: dict, values: dict, ver: Version | None) -> None:
    if "gpu_memory_utilization" not in values:
        flags["gpu_memory_utilization"], sources["gpu_memory_utilization"] = \
            default_gpu_memory_utilization(ver)


def _fill_batch(flags: dict, sources: dict, values: dict, ver: Version | None,
                memory_gib: float | None, name: str | None) -> None:
    """max_num_seqs / max_num_batched_tokens defaults, then vLLM's post-adjustments
    (vllm-facts §4.3): throughput mode doubles defaulted values; without chunked prefill
    tokens >= max_model_len; max_num_seqs <= max_num_batched_tokens."""
    seqs, tokens, rule = batch_defaults(ver, memory_gib, name)
    if flags.get("performance_mode") == "throughput":
        seqs, tokens = seqs * 2, tokens * 2 if tokens else tokens
        rule += "; doubled by --performance-mode throughput"
    if "max_num_seqs" not in values:
        flags["max_num_seqs"], sources["max_num_seqs"] = seqs, f"default ({rule})"
    if "max_num_batched_tokens" not in values:
        max_len = flags.get("max_model_len")
        if flags.get("enable_chunked_prefill") is False and isinstance(max_len, int):
            tokens = max(tokens or 0, max_len)
            rule += "; chunked prefill off -> >= max_model_len"
        flags["max_num_batched_tokens"] = tokens
        sources["max_num_batched_tokens"] = f"default ({rule})"
    if "max_num_seqs" not in values and isinstance(flags["max_num_batched_tokens"], int):
        flags["max_num_seqs"] = min(flags["max_num_seqs"], flags["max_num_batched_tokens"])


def _normalise(flags: dict, sources: dict, values: dict) -> None:
    """Shape a few values the way rules read them."""
    names = flags.get("served_model_name")
    if isinstance(names, list):
        flags["served_model_name_all"] = names
        flags["served_model_name"] = names[0] if names else None
    if flags.get("served_model_name") is None and flags.get("model"):
        flags["served_model_name"] = flags["model"]
        sources["served_model_name"] = "default (= model)"
    if flags.get("max_model_len") == "auto":
        flags["max_model_len"] = None
        sources["max_model_len"] = "argv (auto: largest that fits)"
    if flags.get("limit_mm_per_prompt") is None:
        flags["limit_mm_per_prompt"] = {}
    for key in ("quantization", "kv_cache_dtype", "dtype", "attention_backend"):
        if isinstance(flags.get(key), str):
            flags[key] = flags[key].strip()


def removed_flags(values: dict[str, Any], version: Version | None) -> list[dict[str, str]]:
    """Flags in argv that the running version no longer accepts (table in flags_defaults).
    Each item: ``flag``, ``removed_in``, ``replacement``, ``source``. Unknown version -> []."""
    if version is None:
        return []
    found = []
    for key, removed_in, replacement, source in REMOVED_FLAGS:
        if key in values and version >= Version(removed_in):
            found.append({"flag": "--" + key.replace("_", "-"), "removed_in": removed_in,
                          "replacement": replacement, "source": source})
    return found
