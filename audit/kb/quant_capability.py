"""Minimum GPU compute capability of a quantization method (or compressed-tensors scheme) by
vLLM release, and the first release that runs it on a given GPU.

Sources: the shipped capability tables (``data/vllm/capabilities/<release>.json``,
``quantization.<method>.min_capability``, read from each release's wheel) and, for what they
do not hold (releases before 0.8.5, per-scheme minimums), ``data/quant_min_capability.yaml``
(each row names the wheel and function it was read from). A release's value holds until the
next release known for the same method; a release whose table lacks the method says nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from packaging.version import InvalidVersion, Version

from audit.kb.paths import load_data, per_kb
from audit.kb.release_caps import caps
from audit.kb.vllm_tables import releases


def _parse(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


def _data() -> dict[str, Any]:
    return load_data("quant_min_capability.yaml", _parse)


@per_kb
def history(method: str) -> tuple[tuple[str, int], ...]:
    """((release, minimum capability x 10), ...) of ``method``, oldest first."""
    found: dict[str, int] = {}
    for row in (_data().get("methods") or {}).get(method) or []:
        found[str(row["release"])] = int(row["min"])
    for release in releases():
        entry = caps(release)["quantization"].get(method)
        if entry and isinstance(entry.get("min_capability"), int):
            found[release] = entry["min_capability"]
    return tuple(sorted(found.items(), key=lambda item: Version(item[0])))


def scheme_history(method: str, scheme: str) -> tuple[tuple[str, int], ...]:
    """Like :func:`history` for one scheme of ``method`` (compressed-tensors)."""
    rows = (((_data().get("schemes") or {}).get(method) or {}).get(scheme) or {}).get(
        "history") or []
    return tuple(sorted(((str(r["release"]), int(r["min"])) for r in rows),
                        key=lambda item: Version(item[0])))


def schemes(method: str) -> dict[str, dict[str, Any]]:
    """The schemes of ``method`` with a known history: {name: {label, detect, history}}."""
    return dict((_data().get("schemes") or {}).get(method) or {})


def _after(version: str | None) -> Version | None:
    try:
        return Version(Version(version).public) if version else None
    except InvalidVersion:
        return None


def first_accepting(rows: tuple[tuple[str, int], ...], capability: int,
                    running: str | None) -> str | None:
    """The first release after ``running`` (any when unknown) from which every known
    release accepts ``capability``; None when none does (or the newest still refuses)."""
    if not rows or rows[-1][1] > capability:
        return None
    floor = _after(running)
    first = None
    for release, minimum in rows:
        if minimum > capability:
            first = None
        elif first is None:
            first = release
    if first is not None and floor is not None and Version(first) <= floor:
        return None  # the running release is said to accept it: no release to name
    return first


def runnable_methods(capability: int, among: tuple[str, ...]) -> list[str]:
    """Methods of ``among`` that the newest release listing each runs at ``capability``."""
    out = []
    for method in among:
        rows = history(method)
        if rows and rows[-1][1] <= capability:
            out.append(method)
    return out


def detect_scheme(method: str, quant_config: dict[str, Any] | None) -> str | None:
    """The known scheme a checkpoint's ``quantization_config`` uses (compressed-tensors:
    the weights' ``num_bits``/``type`` of its config groups and whether activations are
    quantized), None when not one of :func:`schemes`."""
    groups = (quant_config or {}).get("config_groups")
    if not isinstance(groups, dict):
        return None
    for name, spec in schemes(method).items():
        want = spec.get("detect") or {}
        for group in groups.values():
            if not isinstance(group, dict):
                continue
            weights = group.get("weights") or {}
            acts = bool(group.get("input_activations"))
            if (weights.get("num_bits") == want.get("weights_num_bits")
                    and str(weights.get("type")) == str(want.get("weights_type"))
                    and acts == bool(want.get("activations"))):
                return name
    return None
