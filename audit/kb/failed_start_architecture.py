"""A failed start's "architecture not supported", judged against the capability tables.

vLLM's registry refuses a model with "Model architectures ['X'] are not supported" (and
Transformers with "model type `x` but Transformers does not recognize"). The message is
believed only when the release's table (:mod:`audit.kb.release_caps`) lacks the
architecture; used by :mod:`audit.kb.failed_start_explain`.
"""

from __future__ import annotations

import re
from typing import Any

from packaging.version import InvalidVersion, Version

from audit.kb import raise_sites as rs
from audit.kb.release_caps import architecture_index, caps

_ARCHITECTURES = re.compile(r"Model architectures \[([^\]]*)\] (?:are not supported|failed)|"
                            r"model type `(\w+)` but Transformers does not recognize")


def architecture(lines: list[str], release: str, running: str | None,
                 model: Any) -> dict[str, Any] | None:
    """"Model architectures ['X'] are not supported" (vLLM's registry) and "model type `x`
    but Transformers does not recognize", judged against the capability tables
    (:mod:`audit.kb.release_caps`): when the running release registers the architecture the
    message cannot mean the release lacks it (the model class failed to load in this
    install: a missing or mismatched dependency, a build without this platform's support),
    so the cause stays not recognised beyond that; else the nearest release that registers
    it (the first newer one, or the last older one when it was removed).

    ``release``: the table judged (formats ``{release:run}`` as the running release);
    ``running``: the running version, None when unknown; ``model``: the served model.
    Returns the :class:`audit.kb.failed_start_explain.Explanation` fields, or None when no
    line is the registry's refusal."""
    for line in reversed(lines):
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
                summary=f"{which} {', '.join(registered)}, yet the model class failed to "
                        "load in this install (a missing or mismatched dependency, or a "
                        "build without this platform's support); the cause is not "
                        "recognised beyond that")
        change = (f"run vLLM {first}" + (" or newer" if running is None else "") +
                  f": its model registry has {shown}" if first else
                  f"serve a model of an architecture vLLM supports; no known release "
                  f"(through {rs.site_releases()[-1]}) has {shown}")
        return dict(
            kind="raise_site", error_line=line, setting="hf:architectures", value=shown,
            changed_in=first, change=change, checked=checked,
            summary=f"vLLM {release:run} does not register the architecture {shown}")
    return None


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
