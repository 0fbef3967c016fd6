"""Where the active knowledge base lives: the one indirection every KB reader goes through.

The built-in knowledge is the repository's own ``audit/rules`` and ``audit/kb/data``. After
``manage.py kb_update`` installs a signed bundle, ``<AUDIT_KB_DIR>/current`` is a symlink to
``<AUDIT_KB_DIR>/bundles/<content hash>/`` holding ``rules/`` and ``data/``; the symlink is
replaced atomically (``os.replace``), so a reader sees either the old or the new bundle, never
half of one. ``AUDIT_RULES_DIR`` (a developer editing rules) still wins for the rules.

Call :func:`active_kb_dirs` (or :func:`kb_data_file` / :func:`load_data`) instead of building
a path next to this file; then a table added under ``audit/kb/data`` follows an installed bundle
too. Works without Django (offline tools): then the built-in directories are used.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import yaml

BUILTIN_RULES_DIR = Path(__file__).resolve().parent.parent / "rules"
BUILTIN_DATA_DIR = Path(__file__).resolve().parent / "data"
#: Name of the symlink under AUDIT_KB_DIR that points at the active bundle directory.
CURRENT_LINK = "current"

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])
_lock = threading.Lock()
_cache: dict[str, tuple[tuple, Any]] = {}


class KbDirs(NamedTuple):
    """The active knowledge base: rule files, data tables, and which bundle (None: built-in)."""

    rules: Path
    data: Path
    bundle: Path | None


def _django_setting(name: str) -> Any:
    """A Django setting when this process already runs Django, else None. Never imports
    Django itself: offline tools and benchmarks load the KB without it."""
    conf = sys.modules.get("django.conf")
    if conf is None or not conf.settings.configured:
        return None
    return getattr(conf.settings, name, None)


def installed_bundle_dir() -> Path | None:
    """The directory of the installed bundle (resolved ``AUDIT_KB_DIR/current``), or None."""
    kb_dir = _django_setting("AUDIT_KB_DIR")
    if not kb_dir:
        return None
    link = Path(kb_dir) / CURRENT_LINK
    try:
        target = link.resolve(strict=True)
    except (OSError, RuntimeError):
        return None
    return target if (target / "rules").is_dir() else None


def active_kb_dirs() -> KbDirs:
    """``(rules, data, bundle)`` of the active knowledge base.

    rules: ``AUDIT_RULES_DIR`` when set, else the installed bundle's ``rules/``, else
    ``audit/rules``; data: the installed bundle's ``data/``, else ``audit/kb/data``.
    """
    bundle = installed_bundle_dir()
    override = _django_setting("AUDIT_RULES_DIR")
    rules = Path(override) if override else (bundle / "rules" if bundle else BUILTIN_RULES_DIR)
    data = bundle / "data" if bundle and (bundle / "data").is_dir() else BUILTIN_DATA_DIR
    return KbDirs(rules, data, bundle)


def kb_data_file(relative: str) -> Path:
    """``relative`` (e.g. ``gpus.yaml``, ``vllm/0.30.0.json``) under the active data dir."""
    return _active_data_dir() / relative


def load_data(relative: str, parse: Callable[[Path], T]) -> T:
    """``parse(path)`` of an active data file, cached until the file or the bundle changes.

    Raises whatever ``parse`` raises (a missing table is a loud failure: FileNotFoundError).
    """
    path = kb_data_file(relative)
    stat = path.stat()
    key = (str(path), stat.st_mtime_ns, stat.st_size)
    slot = f"{relative}:{parse.__module__}.{parse.__qualname__}"
    with _lock:
        hit = _cache.get(slot)
        if hit is not None and hit[0] == key:
            return hit[1]
    value = parse(path)
    with _lock:
        _cache[slot] = (key, value)
    return value


def kb_generation() -> tuple[str | None, str | None]:
    """A cheap token that changes whenever the active KB may have changed:
    ``(AUDIT_KB_DIR, target of its current symlink)`` (None parts when unset or absent).

    One ``readlink`` (about 2 µs) instead of :func:`active_kb_dirs`' full resolve (about
    20 µs): bundle directories are content-addressed and never edited in place, and
    ``kb_update`` changes the active one only by replacing the symlink, so the link's target
    names the bundle's content.
    """
    kb_dir = _django_setting("AUDIT_KB_DIR")
    if not kb_dir:
        return None, None
    kb_dir = str(kb_dir)
    try:
        return kb_dir, os.readlink(f"{kb_dir}/{CURRENT_LINK}")
    except OSError:  # no bundle installed (or not a link): the built-in data
        return kb_dir, None


def per_kb(function: F) -> F:
    """Memoise ``function(*args)`` (hashable positional arguments) per active KB.

    Like :func:`functools.cache`, except that the memo is dropped when :func:`kb_generation`
    changes, so values derived from KB data (indexes over the vLLM release tables) follow an
    installed bundle. Only the newest generation's memo is kept.
    """
    holder: list[tuple[Any, dict]] = [(None, {})]  # one (generation, memo) pair, swapped whole

    @functools.wraps(function)
    def wrapper(*args: Any) -> Any:
        generation = kb_generation()
        memo_generation, memo = holder[0]
        if memo_generation != generation:
            memo = {}
            holder[0] = (generation, memo)
        try:
            return memo[args]
        except KeyError:
            value = memo[args] = function(*args)
            return value

    wrapper.cache_clear = lambda: holder.__setitem__(0, (None, {}))  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


@per_kb
def _active_data_dir() -> Path:
    """:func:`active_kb_dirs` ``.data``, resolved once per active bundle: data readers call
    this per lookup, and the full resolve costs about 20 µs."""
    return active_kb_dirs().data


def active_rules_dir() -> Path:
    """:func:`active_kb_dirs` ``.rules``, resolved once per active bundle and
    ``AUDIT_RULES_DIR``: the evaluation of every report asks."""
    return _rules_dir(_django_setting("AUDIT_RULES_DIR"))


@per_kb
def _rules_dir(override: Any) -> Path:
    """``override`` is the memo's key only (:func:`active_kb_dirs` reads the setting)."""
    return active_kb_dirs().rules


#: libyaml's parser when PyYAML was built with it (the PyPI wheels are): the same safe
#: documents and ``yaml.YAMLError`` errors, about 10x faster than the pure-Python parser
#: (loading the ~220 rules fell from 1.25 s to a tenth of that on a page's first use).
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def safe_load_yaml(stream: str | bytes) -> Any:
    """``yaml.safe_load`` with :data:`_SAFE_LOADER`. Raises ``yaml.YAMLError``."""
    return yaml.load(stream, Loader=_SAFE_LOADER)  # noqa: S506 - a safe loader
