"""Custom CEL functions available to rule expressions (audit/rules/*.yaml).

Every function is null-safe: a null (None) argument where a value is expected yields
``False`` (predicates) or ``None`` (value functions); none of them raise on null input.
A malformed literal (e.g. a bad PEP 440 specifier) still raises ``ValueError`` at run
time, but the engine rejects such literals when the rule file is loaded.

Functions (CEL name -> meaning):

- ``version_in(v, spec)`` -> bool: PEP 440 ``SpecifierSet(spec, prereleases=True)``
  membership. A dev/rc/local build of release X (``0.26.0rc2``, ``0.30.0.dev5``,
  ``0.29.1rc1.dev339+gda9888462``) counts as X as well as itself: true when either
  the exact version or its release ``X.Y.Z`` is inside. Pre-releases of X carry X's
  code, so ``0.26.0rc2`` is inside ``>=0.26.0`` and ``0.30.0rc1`` is not ``<0.30.0``.
- ``version_lt(v, x)`` -> bool: ``version_in(v, "<x")``.
- ``version_ge(v, x)`` -> bool: ``version_in(v, ">=x")``; with the rule above
  ``version_lt`` and ``version_ge`` split every version into exactly one side.
- ``version_gt(v, x)`` -> bool: the release X.Y.Z of ``v`` is after ``x`` (the engine's
  "not yet vetted" test against ``verified_through``).
- ``contains_any(s, [a, b])`` -> bool: case-insensitive substring test.
- ``default(x, y)`` -> x unless null, else y.
- ``lower(s)`` -> lower-case string, null for null.
- ``num(x)`` -> float(x) or null (CEL does not mix int and double in arithmetic).
- ``ratio(a, b)`` -> a / b as float; null when either is null or b is 0.
- ``baseline(family, method, key)`` -> float or null: the speculative-decoding baseline
  table of ``_kb.yaml`` (``baselines:``), keyed by model family and speculator method.
- ``threshold(name)`` -> float or null: a named threshold of ``_kb.yaml`` (``thresholds:``),
  so rules sharing a cut-off (and its source) state it once.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

# CEL built-ins and operator overload ids the Rust runtime knows; rules may use these.
CEL_BUILTINS = frozenset(
    {
        "size", "contains", "startsWith", "endsWith", "matches", "int", "uint", "double",
        "string", "bytes", "bool", "has", "dyn", "type", "timestamp", "duration",
        "all", "exists", "exists_one", "map", "filter",
    }
)

# Functions whose string-literal arguments are PEP 440 specifiers / versions.
SPECIFIER_FUNCTIONS = frozenset({"version_in"})
VERSION_FUNCTIONS = frozenset({"version_lt", "version_ge"})


@lru_cache(maxsize=512)
def _version(value: str) -> Version | None:
    try:
        return Version(value)
    except InvalidVersion:
        return None


@lru_cache(maxsize=512)
def _specifier(spec: str) -> SpecifierSet:
    return SpecifierSet(spec, prereleases=True)


def check_specifier(spec: str) -> None:
    """Raise ``ValueError`` when ``spec`` is not a PEP 440 specifier set."""
    try:
        _specifier(spec)
    except InvalidSpecifier as exc:
        raise ValueError(f"bad PEP 440 specifier {spec!r}: {exc}") from exc


def check_version(value: str) -> None:
    """Raise ``ValueError`` when ``value`` is not a PEP 440 version."""
    if _version(value) is None:
        raise ValueError(f"bad PEP 440 version {value!r}")


def version_in(value: str | None, spec: str | None) -> bool:
    """True when ``value`` (or the release it is a build of) is inside ``spec``. A dev, rc or
    local build of X.Y.Z counts as X.Y.Z; a post release X.Y.Z.postN is a release of its own,
    after X.Y.Z (``version_lt("0.5.3.post1", "0.5.3.post1")`` is False), and its builds count
    as it."""
    if value is None or spec is None:
        return False
    parsed = _version(str(value))
    if parsed is None:
        return False
    specifier = _specifier(str(spec))
    if specifier.contains(parsed, prereleases=True):
        return True
    release = _version(_release_of(parsed))
    return release is not None and specifier.contains(release, prereleases=True)


def _release_of(parsed: Version) -> str:
    """The release a build is of: ``parsed`` without its pre, dev and local parts, its post
    part kept (PEP 440's ``base_version`` drops that too)."""
    post = f".post{parsed.post}" if parsed.post is not None else ""
    epoch = f"{parsed.epoch}!" if parsed.epoch else ""
    return epoch + ".".join(map(str, parsed.release)) + post


def version_lt(value: str | None, bound: str | None) -> bool:
    """True when ``value`` is before release ``bound`` (builds of ``bound`` are not)."""
    return bound is not None and version_in(value, f"<{bound}")


def version_ge(value: str | None, bound: str | None) -> bool:
    """True when ``value`` is ``bound`` or later (builds of ``bound`` included)."""
    return bound is not None and version_in(value, f">={bound}")


def version_gt(value: str | None, bound: str | None) -> bool:
    """True when the release of ``value`` is after ``bound`` (used for "not yet vetted")."""
    if value is None or bound is None:
        return False
    parsed, limit = _version(str(value)), _version(str(bound))
    if parsed is None or limit is None:
        return False
    return Version(parsed.base_version) > limit


def contains_any(text: Any, needles: Any) -> bool:
    """Case-insensitive: does string ``text`` contain any string of list ``needles``?"""
    if not isinstance(text, str) or not needles:
        return False
    haystack = text.lower()
    return any(isinstance(n, str) and n.lower() in haystack for n in needles)


def default(value: Any, fallback: Any) -> Any:
    """``value`` unless it is null, else ``fallback``."""
    return fallback if value is None else value


def lower(text: Any) -> str | None:
    """Lower-case ``text``; null stays null, non-strings are stringified first."""
    return None if text is None else str(text).lower()


def num(value: Any) -> float | None:
    """``value`` as a float (CEL cannot multiply int by double); null if not numeric."""
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def ratio(numerator: Any, denominator: Any) -> float | None:
    """``numerator / denominator`` as float; null on null input or a zero denominator."""
    top, bottom = num(numerator), num(denominator)
    if top is None or bottom is None or bottom == 0:
        return None
    return top / bottom


def make_baseline(table: dict[str, dict[str, dict[str, float]]]) -> Callable[..., Any]:
    """Build ``baseline(family, method, key)`` over ``table[family][method][key]``."""

    def baseline(family: Any, method: Any, key: Any) -> float | None:
        if family is None or method is None or key is None:
            return None
        value = table.get(str(family), {}).get(str(method), {}).get(str(key))
        return num(value)

    return baseline


def make_threshold(table: dict[str, float]) -> Callable[..., Any]:
    """Build ``threshold(name)`` over ``table[name]``."""

    def threshold(name: Any) -> float | None:
        return None if name is None else num(table.get(str(name)))

    return threshold


def functions(settings: dict[str, Any] | None = None) -> dict:
    """All custom CEL functions by name, ready for ``cel.Context.add_function``.

    ``settings`` is the ``settings`` block of ``_kb.yaml`` (baselines, thresholds).
    """
    settings = settings or {}
    return {
        "version_in": version_in,
        "version_lt": version_lt,
        "version_ge": version_ge,
        "version_gt": version_gt,
        "contains_any": contains_any,
        "default": default,
        "lower": lower,
        "num": num,
        "ratio": ratio,
        "baseline": make_baseline(settings.get("baselines") or {}),
        "threshold": make_threshold(settings.get("thresholds") or {}),
    }


FUNCTION_NAMES = frozenset(functions())
