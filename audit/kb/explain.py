"""What one vLLM release makes of a command line (``manage.py explain_argv``).

Pure functions, no Django. :func:`explain` answers for one command line, :func:`explain_batch`
for a JSON list of them. The output is stable (sorted keys, fixed field set): it is also how
the product's knowledge of vLLM is checked from outside, so fields are only ever added.

Answer shape: {vllm_version (as given), version (PEP 440 or null), release (table used),
release_note, gpu {name, memory_gib, count, compute_capability, vendor} | null, launcher,
is_server, settings {name: {value, source (argv|default|derived), detail}}, set [names],
unknown [options no known release has], not_accepted [{flag, reason, added_in, removed_in,
last_accepted, dest, release}], invalid [{flag, value, reason}] (values the release's parser
refuses: "invalid choice", "not a number"), deprecated [spellings], errors [..]}.
"""

from __future__ import annotations

import json
from typing import Any

from audit.kb.effective import effective_flags
from audit.kb.flags import parse_argv
from audit.kb.gpus import describe
from audit.kb.versions import parse_version
from audit.kb.vllm_tables import table_release


class ExplainError(ValueError):
    """Bad input; ``path`` names the offending field (``[3].argv``)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path


def _gpu(gpu: dict[str, Any] | None, path: str) -> dict[str, Any] | None:
    if gpu is None:
        return None
    if not isinstance(gpu, dict):
        raise ExplainError(path, "must be an object or null")
    memory = gpu.get("memory_gib")
    if memory is not None and (isinstance(memory, bool) or not isinstance(memory, (int, float))
                               or memory < 0):
        raise ExplainError(f"{path}.memory_gib", "must be a non-negative number")
    count = gpu.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ExplainError(f"{path}.count", "must be a positive integer")
    name = gpu.get("name")
    if name is not None and not isinstance(name, str):
        raise ExplainError(f"{path}.name", "must be a string")
    facts = describe({"name": name, "memory_gib": memory})
    return {"name": name, "memory_gib": facts["memory_gib"], "count": count,
            "compute_capability": gpu.get("compute_capability") or facts["compute_capability"],
            "vendor": facts["vendor"]}


def _argv(argv: Any, path: str) -> list[str]:
    if not isinstance(argv, list) or not all(isinstance(t, str) for t in argv):
        raise ExplainError(path, "must be a list of strings")
    if not argv or argv[0].startswith("-"):
        return ["vllm", "serve", *argv]  # options alone: read as `vllm serve` arguments
    return list(argv)


def explain(vllm_version: str | None, gpu: dict[str, Any] | None, argv: list[str],
            path: str = "") -> dict[str, Any]:
    """The answer for one command line (module docstring). Raises :class:`ExplainError`."""
    if vllm_version is not None and not isinstance(vllm_version, str):
        raise ExplainError(f"{path}vllm_version", "must be a string or null")
    gpu_facts = _gpu(gpu, f"{path}gpu")
    tokens = _argv(argv, f"{path}argv")
    info = parse_version(vllm_version)
    release, note = table_release(info.version)
    parsed = parse_argv(tokens, release)
    facts = gpu_facts or {}
    flags, meta = effective_flags(parsed, info.version, facts.get("memory_gib"),
                                  facts.get("name"), facts.get("compute_capability"),
                                  facts.get("vendor"))
    settings = {name: {"value": flags[name], "source": meta["source"].get(name, "default"),
                       "detail": meta["sources"].get(name, "")} for name in sorted(flags)
                if not name.endswith("_all")}
    if flags.get("served_model_name_all"):  # vLLM serves every name given (nargs "+")
        settings["served_model_name"]["value"] = flags["served_model_name_all"]
    return {
        "vllm_version": vllm_version, "version": info.version, "version_note": info.note,
        "release": release, "release_note": note, "gpu": gpu_facts,
        "launcher": meta["launcher"], "is_server": meta["is_server"],
        "settings": settings, "set": meta["set"], "unknown": meta["unknown"],
        "not_accepted": meta["not_accepted"], "deprecated": meta["deprecated"],
        "invalid": parsed.invalid, "errors": meta["errors"],
    }


def explain_batch(items: Any) -> list[dict[str, Any]]:
    """Answers for a JSON list of {vllm_version, gpu, argv}. Raises :class:`ExplainError`
    naming the first bad item's field (``[2].gpu.memory_gib``)."""
    if not isinstance(items, list):
        raise ExplainError("$", "must be a JSON list")
    answers = []
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise ExplainError(f"[{index}]", "must be an object")
        answers.append(explain(item.get("vllm_version"), item.get("gpu"),
                               item.get("argv"), path=f"[{index}]."))
    return answers


def to_json(answer: Any) -> str:
    """Stable JSON text (sorted keys, two-space indent, non-JSON values as strings)."""
    return json.dumps(answer, indent=2, sort_keys=True, default=str)


#: Text-format order of setting sources: what the command line set, then what vLLM derives
#: from it, then plain defaults (JSON keeps the sorted-by-name mapping).
SOURCE_ORDER = {"argv": 0, "derived": 1, "default": 2}


def unknown_lines(unknown: list[str], argv: list[str] | None = None) -> list[str]:
    """Text lines for ``unknown`` tokens: options (``--x``) on one line; a bare token is a
    value, named after the unknown option right before it in ``argv`` when there is one
    (``3 (possibly the value of --bogus-flag)``): an option no release knows never takes the
    next token, so the parser reports that token too."""
    options = [t for t in unknown if t.startswith("-")]
    values = [t for t in unknown if not t.startswith("-")]
    lines = [f"unknown options: {', '.join(options)}"] if options else []
    if values:
        tokens = list(argv or [])
        named = []
        for value in values:
            owner = next((tokens[i - 1] for i, t in enumerate(tokens)
                          if t == value and i and tokens[i - 1] in options), None)
            named.append(f"{value} (possibly the value of {owner})" if owner else value)
        lines.append(f"unexpected values: {', '.join(named)}")
    return lines


def to_text(answer: dict[str, Any], argv: list[str] | None = None) -> str:
    """Human-readable form of one answer; ``argv`` (the command line explained) lets unknown
    values be tied to the option before them. Settings: argv, then derived, then defaults."""
    lines = [f"vLLM {answer['vllm_version']}: {answer['release_note']}"]
    if answer["gpu"]:
        gpu = answer["gpu"]
        lines.append(f"GPU: {gpu['count']} x {gpu['name']} ({gpu['memory_gib']} GiB, "
                     f"CC {gpu['compute_capability']})")
    width = max((len(n) for n in answer["settings"]), default=10)
    rows = sorted(answer["settings"].items(),
                  key=lambda item: (SOURCE_ORDER.get(item[1]["source"], 3), item[0]))
    for name, row in rows:
        value = json.dumps(row["value"], sort_keys=True, default=str)
        lines.append(f"  {name:<{width}}  {value}  [{row['source']}] {row['detail']}")
    lines += unknown_lines(answer["unknown"], argv)
    if answer["deprecated"]:
        lines.append(f"deprecated: {', '.join(answer['deprecated'])}")
    for item in answer["not_accepted"]:
        when = item["removed_in"] and f"removed in {item['removed_in']}" or \
            item["added_in"] and f"first in {item['added_in']}" or "in no known release"
        lines.append(f"not accepted by {answer['release']}: {item['flag']} ({when})")
    lines += [f"refused by {answer['release']}: {item['flag']} {item['value']!r} "
              f"({item['reason']})" for item in answer.get("invalid", [])]
    lines += [f"error: {e}" for e in answer["errors"]]
    return "\n".join(lines)
