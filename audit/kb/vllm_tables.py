"""vLLM releases as data: the shipped per-release tables and what they answer.

Tables live in ``audit/kb/data/vllm/<release>.json`` (written by ``manage.py vllm_extract``;
format in :mod:`audit.kb.vllm_extract.build`), or in the ``data/vllm/`` of an installed KB
bundle: they are read through :func:`audit.kb.paths.load_data` and every index over them is
memoised per active KB (:func:`audit.kb.paths.per_kb`), so a bundle's tables apply as soon
as it is installed. This module answers:

* :func:`table_release` — the known release whose table applies to a reported version (the
  nearest release at or below it: ``0.29.1rc1.dev339`` -> ``0.29.0``);
* :func:`spelling_index` — every accepted spelling of a release -> (option, polarity);
* :func:`batch_defaults_for` — the ``get_batch_defaults()`` branch a GPU falls in;
* :func:`accepting_releases` — which known releases accept an option (removed / added when);
* :func:`dest_index` / :func:`dest_releases` — how a release spells a setting, and which
  releases have it (the recommended command is written with these).

A missing table directory (or a missing table file) raises ``FileNotFoundError`` naming it
at first use, never at import.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from audit.kb.paths import BUILTIN_DATA_DIR, kb_data_file, load_data, per_kb
from audit.kb.vllm_extract.conditions import evaluate

#: The shipped tables (the built-in KB); readers use :func:`table_dir` (the active KB's).
TABLE_DIR = BUILTIN_DATA_DIR / "vllm"


@dataclass(frozen=True)
class Spelling:
    """One argv spelling: ``flag`` (the option's primary name, e.g. ``--enable-prefix-caching``),
    ``dest`` (snake_case setting), ``negative`` (True when it sets the option False)."""

    flag: str
    dest: str
    negative: bool


@per_kb
def table_dir() -> Path:
    """``data/vllm`` of the active KB (an installed bundle's, else the shipped one)."""
    return kb_data_file("vllm")


@per_kb
def releases() -> tuple[str, ...]:
    """Known releases, oldest first. Raises FileNotFoundError when none is shipped."""
    folder = table_dir()
    found = sorted((p.stem for p in folder.glob("*.json")), key=Version)
    if not found:
        raise FileNotFoundError(f"no vLLM release tables (vllm/<release>.json) in {folder}")
    return tuple(found)


def _parse_table(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


@per_kb
def table(release: str) -> dict[str, Any]:
    """The table of one known release (KeyError for an unknown one)."""
    if release not in releases():
        raise KeyError(f"no table for vLLM {release}")
    return load_data(f"vllm/{release}.json", _parse_table)


def _version(text: str | None) -> Version | None:
    try:
        return Version(text) if text else None
    except InvalidVersion:
        return None


@per_kb  # every context asks about two to four times; parsing every release costs
def table_release(version: str | None) -> tuple[str, str]:
    """(release, note) for a normalised PEP 440 version (local label allowed).

    Nearest known release at or below ``version``: dev/rc builds of X.Y.Z sort below X.Y.Z,
    so ``0.30.0rc1`` uses 0.29.0. Unknown version -> newest table; older than every table ->
    oldest table. The note says which case applied (shown in the UI).
    """
    known = releases()
    ver = _version(version)
    if ver is None:
        return known[-1], f"version unknown: rules and defaults of {known[-1]} (newest known)"
    base = Version(ver.public)
    below = [r for r in known if Version(r) <= base]
    if not below:
        return known[0], (f"{version} is older than every known release: rules and defaults "
                          f"of {known[0]}")
    release = below[-1]
    if str(base) == release:
        return release, f"{version} → rules and defaults of {release} (its own table)"
    return release, f"{version} → rules and defaults of {release}"


@per_kb
def spelling_index(release: str) -> dict[str, Spelling]:
    """Every spelling ``release`` accepts -> :class:`Spelling`."""
    index: dict[str, Spelling] = {}
    for flag, option in table(release)["options"].items():
        for spelling in option["spellings"]:
            index[spelling] = Spelling(flag, option["dest"], False)
        for spelling in option["negative"]:
            index[spelling] = Spelling(flag, option["dest"], True)
    return index


@per_kb
def union_index() -> dict[str, tuple[str, Spelling]]:
    """Spellings of every known release -> (newest release accepting it, Spelling)."""
    found: dict[str, tuple[str, Spelling]] = {}
    for release in releases():
        for spelling, entry in spelling_index(release).items():
            found[spelling] = (release, entry)
    return found


@per_kb
def dest_index(release: str) -> dict[str, str]:
    """Setting (``dest``, e.g. ``enable_prefix_caching``) -> the primary flag ``release``
    spells it with (``--enable-prefix-caching``); settings it lacks are absent."""
    return {opt["dest"]: flag for flag, opt in table(release)["options"].items()}


@per_kb
def dest_releases(dest: str) -> tuple[str, ...]:
    """Known releases that have the setting ``dest``, oldest first."""
    return tuple(r for r in releases() if dest in dest_index(r))


def option(release: str, flag: str) -> dict[str, Any]:
    """The option entry of ``flag`` in ``release`` (KeyError when absent)."""
    return table(release)["options"][flag]


@per_kb
def accepting_releases(spelling: str) -> tuple[str, ...]:
    """Known releases that accept ``spelling``, oldest first."""
    return tuple(r for r in releases() if spelling in spelling_index(r))


def acceptance(spelling: str, release: str) -> dict[str, Any] | None:
    """None when ``release`` accepts ``spelling``; else why not: {flag, reason ("removed" |
    "added_later" | "never"), last_accepted, removed_in, added_in} (releases are known
    releases, so "removed_in" is the first known release without it)."""
    known = releases()
    accepted = accepting_releases(spelling)
    if release in accepted:
        return None
    out = {"flag": spelling, "release": release, "reason": "never", "last_accepted": None,
           "removed_in": None, "added_in": None}
    if not accepted:
        return out
    older = [r for r in accepted if Version(r) < Version(release)]
    if older:
        last = older[-1]
        out.update(reason="removed", last_accepted=last, removed_in=known[known.index(last) + 1])
    else:
        out.update(reason="added_later", added_in=accepted[0])
    return out


def batch_defaults_for(release: str, gpu: dict[str, Any]) -> dict[str, Any]:
    """The API server's batch defaults for ``gpu`` on ``release``.

    ``gpu``: {memory_gib (float GiB, device 0), name (NVML name), capability [major, minor],
    platform "cuda" | "rocm"}; missing memory is read as the smallest tier (0 GiB).
    Returns {max_num_seqs, max_num_batched_tokens, branch (the condition's source), note}.
    Platform rows (TPU/CPU) win when they match; otherwise the first matching row; no match
    -> SchedulerConfig fallbacks.
    """
    probe = dict(gpu)
    note = ""
    if probe.get("memory_gib") is None:
        probe["memory_gib"] = 0.0
        note = "GPU memory unknown: smallest tier assumed"
    probe.setdefault("name", "")
    rows = table(release)["batch_defaults"]
    platform_rows = [r for r in rows if "platform" in json.dumps(r["when"])]
    for row in platform_rows + [r for r in rows if r not in platform_rows]:
        if evaluate(row["when"], probe) is True:
            return {"max_num_seqs": row["max_num_seqs"]["api_server"],
                    "max_num_batched_tokens": row["max_num_batched_tokens"]["api_server"],
                    "branch": row["when_source"], "function": row["function"], "note": note}
    fallback = table(release)["scheduler_fallbacks"]
    return {"max_num_seqs": fallback.get("max_num_seqs"),
            "max_num_batched_tokens": fallback.get("max_num_batched_tokens"),
            "branch": None, "function": "SchedulerConfig", "note": note or "no branch matched"}
