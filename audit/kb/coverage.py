"""What the knowledge base covers: rules per vLLM release and per model family (KB page).

Releases a rule covers are read from its vLLM version literals: ``version_in(vllm.*, SPEC)``,
``version_lt/ge/gt(vllm.*, "X")`` in its condition or ``applies``. A release counts when it
satisfies ANY of those literals (a union: ``!version_lt(...)`` or ``&&`` of two bounds is
read as the looser range, so counts are an upper bound per release). A rule with no vLLM
version literal applies to every release and is counted once, apart.

Families: the rule's ``families:`` list when given, else every family whose keyword appears in
its id, condition or ``applies`` (``model.is_gemma4`` -> gemma4); none found: "any model".
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from audit.kb.engine import CALL_RE, KnowledgeBase, Rule, _call_arguments, _string_literal
from audit.kb.versions import RELEASE_TIMELINE

ANY_MODEL = "any model"
#: (family shown, regex over lower-cased id + condition). Order: most specific first.
FAMILY_KEYWORDS: tuple[tuple[str, str], ...] = (
    ("gemma4", r"gemma[-_ ]?4|is_gemma4"),
    ("gemma (1-3)", r"gemma[-_ ]?[123]\b|\"gemma\""),
    ("qwen", r"qwen"),
    ("llama", r"llama"),
    ("deepseek", r"deepseek"),
    ("glm", r"\bglm|glm[-_]?\d"),
    ("kimi", r"kimi"),
    ("minimax", r"minimax"),
    ("gpt-oss", r"gpt[-_]oss"),
    ("mistral", r"mistral|mixtral"),
    ("phi", r"\bphi[-_]?\d"),
)
_FAMILY_RES = tuple((name, re.compile(pattern)) for name, pattern in FAMILY_KEYWORDS)


@dataclass(frozen=True)
class Coverage:
    """``releases``: (release, rules covering it, verified?) oldest first; ``every_release``:
    rules with no version literal; ``families``: (family, rules) most rules first."""

    releases: list[tuple[str, int, bool]]
    every_release: int
    families: list[tuple[str, int]]


def rule_families(rule: Rule) -> list[str]:
    """The model families ``rule`` is about (see module docstring)."""
    if rule.families:
        return list(rule.families)
    text = f"{rule.id}\n{rule.condition_text}".lower()
    found = [name for name, pattern in _FAMILY_RES if pattern.search(text)]
    return found or [ANY_MODEL]


def version_tests(rule: Rule) -> list[tuple[str, str]]:
    """``[(function, literal)]`` of the vLLM version literals in ``rule``'s expressions."""
    tests = []
    text = rule.condition_text
    for match in CALL_RE.finditer(text):
        args = _call_arguments(text, match.end())
        if len(args) < 2 or not args[0].strip().startswith("vllm."):
            continue
        literal = _string_literal(args[1])
        if literal is not None:
            tests.append((match.group(1), literal))
    return tests


def covers(tests: list[tuple[str, str]], release: str) -> bool:
    """True when ``release`` satisfies any of ``tests`` (invalid literals never match)."""
    try:
        version = Version(release)
    except InvalidVersion:
        return False
    for function, literal in tests:
        try:
            if function == "version_in":
                hit = SpecifierSet(literal).contains(version, prereleases=True)
            else:
                bound = Version(literal)
                hit = {"version_lt": version < bound, "version_ge": version >= bound,
                       "version_gt": version > bound}[function]
        except (InvalidSpecifier, InvalidVersion, KeyError):
            continue
        if hit:
            return True
    return False


def known_releases(data_dir: Path, verified_through: str | None,
                   extra: Iterable[str] = ()) -> list[str]:
    """Releases to show, oldest first: the timeline (audit/kb/versions.py), every per-release
    table ``<data_dir>/vllm/<release>.json``, ``verified_through`` and ``extra`` (e.g. the
    newest release running in the fleet)."""
    names = {version for version, _date, _source in RELEASE_TIMELINE} | set(extra)
    names.update(p.stem for p in (data_dir / "vllm").glob("*.json"))
    if verified_through:
        names.add(verified_through)
    valid = []
    for name in names:
        try:
            valid.append((Version(name), name))
        except InvalidVersion:
            continue
    return [name for _v, name in sorted(valid)]


def release_dates(data_dir: Path) -> dict[str, str]:
    """``{release: "YYYY-MM-DD"}`` from the timeline and the tables' ``released`` field."""
    dates = {version: day.isoformat() for version, day, _source in RELEASE_TIMELINE}
    for path in (data_dir / "vllm").glob("*.json"):
        try:
            released = json.loads(path.read_text(encoding="utf-8")).get("released")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(released, str) and released[:10]:
            dates.setdefault(path.stem, released[:10])
    return dates


def coverage(kb: KnowledgeBase, data_dir: Path, extra: Iterable[str] = ()) -> Coverage:
    """Rules per release and per family of ``kb`` (see module docstring); ``extra``:
    more releases to list (those running in the fleet)."""
    releases = known_releases(data_dir, kb.verified_through, extra)
    tests = {rule.id: version_tests(rule) for rule in kb.rules}
    every = sum(1 for t in tests.values() if not t)
    try:
        vetted = Version(kb.verified_through) if kb.verified_through else None
    except InvalidVersion:
        vetted = None
    rows = [(release, sum(1 for t in tests.values() if t and covers(t, release)),
             vetted is not None and Version(release) <= vetted) for release in releases]
    families = Counter(f for rule in kb.rules for f in rule_families(rule))
    return Coverage(rows, every, sorted(families.items(), key=lambda kv: (-kv[1], kv[0])))
