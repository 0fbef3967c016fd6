"""A failed start's "architecture not supported", judged against the capability tables.

vLLM's registry refuses a model with "Model architectures ['X'] are not supported" (and
Transformers with "model type `x` but Transformers does not recognize"). The registry prints
the same refusal when the model class exists but failed to import (a missing or mismatched
dependency), so the message is believed only when nothing says the release has the
architecture: not the line's own "Supported architectures: [...]" list (when the agent's cut
of the line still holds the name) and not the release's table (:mod:`audit.kb.release_caps`).
A release older than every table is said to likely predate an architecture the oldest table
already has, not to lack it. Used by :mod:`audit.kb.failed_start_explain`.
"""

from __future__ import annotations

import re
from typing import Any

from packaging.version import InvalidVersion, Version

from audit.kb import raise_sites as rs
from audit.kb.release_caps import architecture_index, caps, releases

_ARCHITECTURES = re.compile(r"Model architectures \[([^\]]*)\] (?:are not supported|failed)|"
                            r"model type `(\w+)` but Transformers does not recognize")
#: The list vLLM appends to the refusal: "Supported architectures: [...]" (a list or
#: ``dict_keys([...])``), on the same line or the next ones.
_SUPPORTED = re.compile(r"Supported architectures:(.*)$")
_LOAD_FAILED = ("yet the model class failed to load in this install (a missing or mismatched "
                "dependency, or a build without this platform's support); the cause is not "
                "recognised beyond that")


def architecture(lines: list[str], release: str, running: str | None,
                 model: Any) -> dict[str, Any] | None:
    """"Model architectures ['X'] are not supported" (vLLM's registry) and "model type `x`
    but Transformers does not recognize", judged against the capability tables
    (:mod:`audit.kb.release_caps`): when the line's own "Supported architectures" list names
    the architecture, or the running release's table registers it, the message cannot mean
    the release lacks it (the model class failed to load in this
    install: a missing or mismatched dependency, a build without this platform's support),
    so the cause stays not recognised beyond that; else the nearest release that registers
    it (the first newer one, or the last older one when it was removed).

    ``release``: the table judged (formats ``{release:run}`` as the running release);
    ``running``: the running version, None when unknown; ``model``: the served model.
    Returns the :class:`audit.kb.failed_start_explain.Explanation` fields, or None when no
    line is the registry's refusal."""
    for at in range(len(lines) - 1, -1, -1):
        line = lines[at]
        found = _ARCHITECTURES.search(line)
        if not found:
            continue
        names = [n for n in re.findall(r"'(\w+)'", found[1] or "") or [found[2]] if n]
        index = architecture_index()
        if found[2]:  # a model type: the architecture's name starts with it
            stem = found[2].replace("_", "").lower()
            names = sorted(a for a in index if a.lower().startswith(stem))[:1] or names
        shown = ", ".join(names)
        checked = (f"vLLM's model registry: the model's config.json architectures "
                   f"(model {model or 'as served'})")
        listed = [n for n in names if n in _supported_listed(lines[at:])]
        if listed:
            return dict(
                kind="architecture_load_failed", error_line=line, confidence="medium",
                checked=checked, value=shown,
                summary=f"vLLM's own error lists {', '.join(listed)} among the supported "
                        f"architectures, so the release has it, {_LOAD_FAILED}")
        # older than every table: the table is not the running release's
        below = running is not None and _older(running, release)
        registered = [] if below else [n for n in names if n in _registered(release)]
        first = _nearest_registering(names, running)
        if registered:
            # with the version unreported, the newest table having it means every release
            # from the first that has it does: the release cannot be what lacks it
            which = (f"vLLM {release:run} registers" if running is not None else
                     f"every vLLM release from {_nearest_registering(names, None)} on "
                     "registers (the running version was not reported)")
            return dict(
                kind="architecture_load_failed", error_line=line, confidence="medium",
                checked=checked, value=shown,
                summary=f"{which} {', '.join(registered)}, {_LOAD_FAILED}")
        change = (f"run vLLM {first}" + (" or newer" if running is None else "") +
                  f": its model registry has {shown}" if first else
                  f"serve a model of an architecture vLLM supports; no known release "
                  f"(through {rs.site_releases()[-1]}) has {shown}")
        summary = f"vLLM {release:run} does not register the architecture {shown}"
        if below and first == releases()[0]:
            # older than every table, and the oldest already has it: no table shows that
            # this release lacks it, so the refusal is read as likely, not as a table's fact
            summary = (f"vLLM {running} refused the architecture {shown}; it is older than "
                       f"every shipped table and the oldest ({first}) registers {shown}, so "
                       f"{running} likely predates it (if this error's own 'Supported "
                       "architectures' list names it, the model class failed to load "
                       "instead)")
        return dict(
            kind="raise_site", error_line=line, setting="hf:architectures", value=shown,
            changed_in=first, change=change, checked=checked, summary=summary)
    return None


def _supported_listed(lines: list[str]) -> set[str]:
    """Architecture names of the "Supported architectures: [...]" list in ``lines`` (the
    refusal's line and the ones after it); empty when the log does not carry the list."""
    for line in lines:
        found = _SUPPORTED.search(line)
        if found:
            return set(re.findall(r"'(\w+)'", found[1]))
    return set()


def _older(running: str, release: str) -> bool:
    try:
        return Version(running) < Version(release)
    except InvalidVersion:
        return False


def _registered(release: str) -> set[str]:
    try:
        return set(caps(release)["architectures"])
    except FileNotFoundError:
        return set()


def _nearest_registering(names: list[str], running: str | None) -> str | None:
    """The first release newer than ``running`` (every one when unknown) that registers one
    of ``names``, else the newest older one (the architecture was removed); None when no
    table has it."""
    index = architecture_index()
    having = sorted({r for n in names for r in index.get(n, ())}, key=Version)
    newer = [r for r in having if running is None or Version(r) > Version(running)]
    return newer[0] if newer else (having[-1] if having else None)
