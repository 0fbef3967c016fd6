"""vLLM's start-up raise sites per release (``data/vllm/raise_sites/<release>.json.gz``), and
matching an error line to them.

The files are written by :mod:`audit.kb.vllm_extract.raise_sites` (site shape there). This
module loads them (cached per active KB) and answers "which check of vLLM raised this line?":

* :func:`exception_of` splits a log line into (exception class, message): ``ERROR 07-28
  [core.py:632] RuntimeError: CUDA error: …``, ``[rank0]: ValueError: …``, pydantic's
  ``Value error, <msg> [type=value_error, …]`` / ``Assertion failed, <msg>``, argparse's
  ``prog: error: <msg>`` (class ``SystemExit``), a bare ``AssertionError``;
* :func:`match_line` finds the best site of one release for such a line: same exception
  class (pydantic's wrapping and subclasses aside), the pattern matching the start of the
  whitespace-collapsed message, most literal characters first; the holes come back as values.
  A message cut short (the agent keeps 500 characters; reports abridge) matches the
  pattern's beginning up to a hole that takes the rest, at half weight.
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.version import Version

from audit.kb.paths import load_data, per_kb
from audit.kb.vllm_tables import table_dir

#: ``SomeError: message`` anywhere in a line (the first one: log prefixes come before it).
_EXCEPTION = re.compile(
    r"(?<![\w.])((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt))(?::\s?(.*))?$")
#: An exception shown as its repr: ``ValueError("type fp8e4nv not supported …")``.
_CALLED = re.compile(r"(?<![\w.])((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception))"
                     r"\((['\"])(.*?)\2?\)?$")
#: pydantic's rendering of an error raised inside a config class's validator
#: (``Value error, <msg> [type=value_error, input_value=…]``).
_PYDANTIC = re.compile(r"\b(Value error|Assertion failed), (.*?)(?: \[type=\w+.*)?$")
#: argparse's exit line: ``vllm: error: <msg>`` / ``api_server.py: error: <msg>``.
_ARGPARSE = re.compile(r"(?:^|\s)[\w./-]+: error: (.+)$")
#: vLLM's log prefix (``(EngineCore pid=1) ERROR 07-28 15:07:22 [core.py:632] ``, ``[rank0]: ``):
#: cut before a line that names no exception is matched to a message anywhere in it.
_PREFIX = re.compile(r"^(?:\([^)]*\)\s*)?(?:\[rank\d+\]:?\s*)?(?:(?:DEBUG|INFO|WARNING|ERROR|"
                     r"CRITICAL)\s+\d\d-\d\d\s+[\d:.]+\s+(?:\[?[\w.]+:\d+\]?)?\s*)?")
#: Literal characters a site needs to be matched inside a line that names no exception.
_BARE_LITERAL = 20
#: A line this long may have been cut by the agent (fleet_agent.failed_starts keeps 500
#: characters): a quote opening its message may have lost its closing one.
_CUT_AT = 400
#: Classes that stand for one another in a log: pydantic turns a ValueError/AssertionError
#: raised in ``__post_init__`` into a ValidationError line followed by the inner message.
_SAME = {"ValidationError": {"ValueError", "AssertionError", "TypeError"}}


@dataclass
class Site:
    """One raise site (see :mod:`audit.kb.vllm_extract.raise_sites`) of ``release``."""

    release: str
    exc: str
    pattern: str
    literal: int
    holes: list[str]
    at: str
    function: str
    guard: str | None
    reads: list[str]
    _compiled: re.Pattern | None = field(default=None, repr=False)
    _anchor: str = field(default="", repr=False)
    _cut: list[re.Pattern] | None = field(default=None, repr=False)
    _head: str | None = field(default=None, repr=False)

    def regex(self) -> re.Pattern:
        if self._compiled is None:
            self._compiled = re.compile(self.pattern, re.DOTALL)
        return self._compiled

    def anchor(self) -> str:
        """The longest literal run of the pattern (a cheap ``in`` test before the regex)."""
        if not self._anchor:
            runs = re.split(r"\(\?P<h\d+>\.\+\?\)", self.pattern)
            self._anchor = max((re.sub(r"\\(.)", r"\1", r) for r in runs), key=len)
        return self._anchor

    def head(self) -> str:
        """The literal text before the first hole (unescaped)."""
        if self._head is None:
            self._head = re.sub(r"\\(.)", r"\1",
                                re.split(r"\(\?P<h\d+>", self.pattern, maxsplit=1)[0])
        return self._head

    def truncated(self) -> list[re.Pattern]:
        """Patterns for a message cut short (the agent keeps 500 characters of a line): the
        pattern up to each hole, last first, that hole taking the rest of the line; only
        where at least :data:`_BARE_LITERAL` literal characters come before it."""
        if self._cut is None:
            pieces = re.split(r"(\(\?P<h\d+>\.\+\?\))", self.pattern)
            self._cut = []
            for index in range(len(pieces) - 2, 0, -2):
                head = "".join(pieces[:index])
                if len(re.sub(r"\(\?P<h\d+>\.\+\?\)|\\", "", head)) >= _BARE_LITERAL:
                    self._cut.append(re.compile(head + pieces[index].replace(".+?", ".*")
                                                + "$", re.DOTALL))
        return self._cut

    def key(self) -> tuple[str, str]:
        return self.exc, self.pattern


@dataclass
class LineMatch:
    """A site matched by a line: the site, its hole values (by hole index) and the line."""

    site: Site
    values: list[str | None]
    line: str
    exc: str
    message: str
    truncated: bool = False  #: matched on its beginning only (the line was cut)


def exception_of(line: str) -> tuple[str, str] | None:
    """(exception class, message) of a log line, or None when it names no exception."""
    text = " ".join(line.split())
    pydantic = _PYDANTIC.search(text)
    if pydantic:
        kind = "ValueError" if pydantic[1] == "Value error" else "AssertionError"
        return kind, pydantic[2]
    called = _CALLED.search(text)
    if called:
        return called[1].split(".")[-1], called[3]
    found = _EXCEPTION.search(text)
    if found:
        message = (found[2] or "").strip()
        if len(message) > 1 and message[0] in "'\"" and (
                message[0] == message[-1] or len(text) >= _CUT_AT):
            # KeyError shows its message as a repr (the closing quote may be cut off)
            message = message[1:-1] if message[0] == message[-1] else message[1:]
        return found[1].split(".")[-1], message
    parsed = _ARGPARSE.search(text)
    if parsed:
        return "SystemExit", parsed[1].strip()
    return None


def _parse(path: Path) -> list[Site]:
    data = json.loads(gzip.decompress(path.read_bytes()))
    return [Site(release=data["release"], **{k: s[k] for k in (
        "exc", "pattern", "literal", "holes", "at", "function", "guard", "reads")})
        for s in data["sites"]]


def sites_dir() -> Path:
    """``data/vllm/raise_sites`` of the active KB."""
    return table_dir() / "raise_sites"


@per_kb
def site_releases() -> tuple[str, ...]:
    """Releases with a raise-site file, oldest first (FileNotFoundError when none)."""
    found = sorted((p.name.removesuffix(".json.gz") for p in sites_dir().glob("*.json.gz")),
                   key=Version)
    if not found:
        raise FileNotFoundError(f"no raise-site files (<release>.json.gz) in {sites_dir()}")
    return tuple(found)


def sites(release: str) -> list[Site]:
    """The raise sites of one release (FileNotFoundError when it has no file)."""
    return load_data(f"vllm/raise_sites/{release}.json.gz", _parse)


@per_kb
def by_exception(release: str) -> dict[str, list[Site]]:
    """The sites of ``release`` by exception class."""
    out: dict[str, list[Site]] = {}
    for site in sites(release):
        out.setdefault(site.exc, []).append(site)
    return out


@per_kb
def patterns(release: str) -> frozenset[tuple[str, str]]:
    """(exception, pattern) of every site of ``release``: the checks it has."""
    return frozenset(s.key() for s in sites(release))


def nearest(version: str | None) -> list[str]:
    """Releases to try for ``version``: its own (the nearest at or below it), then the
    neighbours outwards (newer first at equal distance: a nightly build is ahead)."""
    known = list(site_releases())
    try:
        base = Version(Version(version).public) if version else None
    except ValueError:
        base = None
    if base is None:
        return known[::-1]
    below = [r for r in known if Version(r) <= base]
    start = known.index(below[-1]) if below else 0
    order = [known[start]]
    for step in range(1, len(known)):
        for index in (start + step, start - step):
            if 0 <= index < len(known):
                order.append(known[index])
    return order


def _compatible(line_exc: str, site_exc: str) -> bool:
    return line_exc == site_exc or site_exc in _SAME.get(line_exc, ()) or \
        line_exc in _SAME.get(site_exc, ())


def match_line(line: str, release: str) -> LineMatch | None:
    """The best site of ``release`` for one log line (module docstring), or None. A line
    that names no exception (a report quoting only the message) matches a site with at least
    :data:`_BARE_LITERAL` literal characters anywhere in it."""
    found = exception_of(line)
    bare = found is None
    exc, message = found or ("", _PREFIX.sub("", " ".join(line.split())))
    best: tuple[int, LineMatch] | None = None
    index = by_exception(release)
    pool = sites(release) if bare else [s for kind in (exc, *_SAME.get(exc, ()))
                                        for s in index.get(kind, ())]
    pool += [] if bare else [s for kind, group in index.items()
                             if exc in _SAME.get(kind, ()) for s in group]
    for site in pool:
        if bare and site.literal < _BARE_LITERAL:
            continue
        prefix = bare and len(message) >= _BARE_LITERAL and \
            site.head().lower().startswith(message.rstrip(" .").lower())
        head = site.head()[:_BARE_LITERAL]
        if not (bare or _compatible(exc, site.exc)) or not (
                site.anchor() in message or prefix
                or (len(head) == _BARE_LITERAL and head in message)):
            continue
        hit = (site.regex().search if bare else site.regex().match)(message)
        cut = False
        if hit is None and prefix:
            hit = re.match("", "")  # the line quotes the message's beginning only
        if hit is None and not bare:  # cut by the agent, or abridged by a report
            hit = next((m for m in (p.match(message) for p in site.truncated()) if m), None)
            cut = True
        if hit is None:
            continue
        score = site.literal // 2 if cut else site.literal
        if best is None or score > best[0]:
            values = [hit.group(f"h{i}") if f"h{i}" in hit.groupdict() else None
                      for i in range(len(site.holes))]
            best = (score, LineMatch(site, values, line, exc or site.exc, message, cut))
    return best[1] if best else None


def changed_in(site: Site) -> str | None:
    """The first known release after ``site.release`` that no longer has this check, or
    None when every newer release still has it. A check reworded (same exception, and the
    same condition or the same first 24 characters of message) is still there."""
    later = [r for r in site_releases() if Version(r) > Version(site.release)]
    head = site.head()[:24]
    for release in later:
        if site.key() in patterns(release):
            continue
        if not any(s.exc == site.exc and ((site.guard and s.guard == site.guard)
                                          or s.head()[:24] == head) for s in sites(release)):
            return release
    return None


def as_dict(site: Site) -> dict[str, Any]:
    """A site for evidence (JSON)."""
    return {"release": site.release, "exception": site.exc, "at": site.at,
            "function": site.function, "guard": site.guard, "reads": list(site.reads)}
