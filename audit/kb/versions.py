"""Normalise every vLLM version form an agent can report to one PEP 440 version.

Forms handled (all pure string work, never raises):

* plain releases ``0.25.1``, ``v0.26.0``, ``0.13``, ``0.6.4.post1``;
* container references ``vllm/vllm-openai:v0.27.0`` (optionally ``@sha256:…``);
* development builds ``0.29.1rc1.dev339+gda9888462`` (local label dropped for ranges);
* dated nightlies ``nightly-2026-07-01`` / ``nightly-20260701`` -> the development line after
  the last release published on or before that date (timeline: vllm-facts §0);
* undated nightlies ``nightly``, ``cu130-nightly``, ``nightly-aarch64``, ``nightly-<commit>``
  -> unknown, ``is_nightly``;
* pre-release image tags ``gemma4-0505-cu130`` -> mapped by the embedded date when there is
  one (MMDD without a year is read as 2026, the year of the Gemma 4 previews), else unknown;
* ``latest`` / ``stable`` / ``None`` -> unknown;
* setuptools-scm's fallback ``0.1.devN+g<sha>`` (a source build from a checkout without
  release tags, e.g. the ``deepseekv4-cu130`` preview image of vllm#40802) -> unknown,
  a development build: vLLM's 0.1.x line (2023) never shipped ``.dev`` builds, so the
  string says nothing about the release it was built after.

A mapped nightly of date D after release X.Y.Z becomes ``X.Y.(Z+1).dev0`` — the same shape
vLLM's own setuptools-scm builds take (``0.20.2rc1.dev49`` was built after 0.20.1), so PEP 440
ranges place it after X.Y.Z and before the next release.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from datetime import date

from packaging.version import InvalidVersion, Version

# (release, date it was published or first seen in use, source). Dates marked "<=" are the
# first date the release is seen in use, so the real release may be a few days earlier; a
# nightly between the two is then mapped to the previous line (conservative).
# Source: docs/vllm-facts.md §0 "Release timeline", seed 000 (0.26.0 in a
# reporter matrix on 2026-07-31), vllm-facts §7 metrics INDEX (0.24.0 stated 2026-07-11).
RELEASE_TIMELINE: tuple[tuple[str, date, str], ...] = (
    ("0.20.0", date(2026, 4, 30), "<= 2026-04-30: seed 000 audit ran on it; NeMo-RL#2384"),
    ("0.20.2", date(2026, 5, 10), "shipped 2026-05-10 (vllm-facts §0)"),
    ("0.21.0", date(2026, 5, 16), "<= 2026-05-16 (llm-d-benchmark#1290)"),
    ("0.22.0", date(2026, 5, 30), "2026-05-30 (aws/deep-learning-containers#6177)"),
    ("0.22.1", date(2026, 6, 10), "early June 2026, approximate (vllm-facts §0)"),
    ("0.23.0", date(2026, 6, 20), "mid-June 2026, approximate (vllm-facts §0)"),
    ("0.24.0", date(2026, 7, 11), "<= 2026-07-11 (evoke fixture, metrics INDEX)"),
    ("0.25.1", date(2026, 7, 24), "<= 2026-07-24 (agentic-coding-harness-benchmarks#14)"),
    ("0.26.0", date(2026, 7, 31), "<= 2026-07-31 (seed 000, #49955 reporter matrix)"),
    ("0.27.1", date(2026, 8, 13), "2026-08-13 (vllm-metal#603)"),
    ("0.28.0", date(2026, 8, 26), "2026-08-26 (coreweave/ml-containers#218)"),
    ("0.29.0", date(2026, 9, 10), "~2026-09-10 (AMD-AGI/TraceLens#1019)"),
    ("0.30.0", date(2026, 9, 23), "~2026-09-23 (AMD-AGI/TraceLens#1055)"),
)

_YEAR_FOR_MMDD = 2026  # Gemma 4 preview images (e.g. gemma4-0505-cu130) are 2026 builds.
_UNKNOWN_TAGS = {"latest", "stable", "main", "dev"}
_IMAGE_RE = re.compile(r"^(?P<repo>[\w.\-]+(?::\d+)?(?:/[\w.\-]+)+):(?P<tag>[\w.\-+]+)$")
_EMBEDDED_RE = re.compile(
    r"(?<![\w.])v?(\d+\.\d+(?:\.\d+)*(?:(?:a|b|rc)\d+)?(?:\.post\d+)?(?:\.dev\d+)?(?:\+[\w.]+)?)"
)
_FULL_DATE_RE = re.compile(r"(?<!\d)(20\d\d)-?(0[1-9]|1[0-2])-?([0-3]\d)(?!\d)")
_MMDD_RE = re.compile(r"(?<!\d)(0[1-9]|1[0-2])([0-3]\d)(?!\d)")


@dataclass(frozen=True)
class VersionInfo:
    """Result of :func:`parse_version`.

    ``version`` is a normalised PEP 440 public version string (no local label) or None when
    unknown; ``raw`` the input; ``note`` says how it was mapped; ``is_prerelease`` is True for
    dev/rc builds and pre-release images; ``is_nightly`` for nightly images/builds.
    """

    version: str | None
    raw: str | None
    note: str
    is_prerelease: bool = False
    is_nightly: bool = False

    def as_dict(self) -> dict:
        """Plain dict (JSON-able) of the fields."""
        return asdict(self)


def release_for_date(day: date) -> tuple[str, str] | None:
    """Latest release published on or before ``day`` as (version, source), or None if earlier
    than the timeline (:data:`RELEASE_TIMELINE`, vllm-facts §0)."""
    found = None
    for version, published, source in RELEASE_TIMELINE:
        if published <= day:
            found = (version, source)
    return found


def _next_dev(release: str) -> str:
    """``0.25.1`` -> ``0.25.2.dev0``: the development line that follows a release."""
    parts = list(Version(release).release) + [0, 0]
    return str(Version(f"{parts[0]}.{parts[1]}.{parts[2] + 1}.dev0"))


def _find_date(tag: str) -> tuple[date, str] | None:
    """A date embedded in a tag: YYYY-MM-DD / YYYYMMDD, else MMDD (year assumed 2026)."""
    match = _FULL_DATE_RE.search(tag)
    try:
        if match:
            return date(int(match[1]), int(match[2]), int(match[3])), match[0]
        match = _MMDD_RE.search(tag)
        if match:
            return date(_YEAR_FOR_MMDD, int(match[1]), int(match[2])), match[0]
    except ValueError:  # e.g. 0231: not a real day
        return None
    return None


def _from_pep440(text: str, raw: str, prefix: str) -> VersionInfo | None:
    """Parse a PEP 440 string (``v`` prefix allowed); None when it is not one."""
    try:
        parsed = Version(text)
    except InvalidVersion:
        return None
    public = parsed.public
    if parsed.is_devrelease and parsed.release[:2] == (0, 1):
        return VersionInfo(None, raw, f"{prefix}setuptools-scm fallback version {public} (source "
                           "build without release tags): version unknown", True, False)
    if parsed.is_devrelease:
        kind = f"development build (toward {parsed.base_version})"
    elif parsed.is_prerelease:
        kind = f"pre-release (toward {parsed.base_version})"
    else:
        kind = "release"
    note = f"{prefix}{kind} {public}"
    if parsed.local:
        note += f" (local label +{parsed.local} ignored for version ranges)"
    return VersionInfo(public, raw, note, parsed.is_prerelease, False)


def _from_dated_tag(tag: str, raw: str, prefix: str, nightly: bool) -> VersionInfo:
    """Map a nightly or pre-release image tag by its embedded date, else unknown."""
    kind = "nightly" if nightly else "pre-release image"
    found = _find_date(tag)
    if found is None:
        return VersionInfo(None, raw, f"{prefix}undated {kind} '{tag}': version unknown",
                           True, nightly)
    day, text = found
    release = release_for_date(day)
    if release is None:
        return VersionInfo(None, raw, f"{prefix}{kind} dated {day} ('{text}') predates the "
                           "release timeline: version unknown", True, nightly)
    mapped = _next_dev(release[0])
    note = (f"{prefix}{kind} dated {day} ('{text}') -> development line after v{release[0]} "
            f"({release[1]}): {mapped}")
    if not _FULL_DATE_RE.search(tag):
        note += f"; year {_YEAR_FOR_MMDD} assumed"
    return VersionInfo(mapped, raw, note, True, nightly)


def parse_version(raw: str | None) -> VersionInfo:
    """Normalise any vLLM version form; never raises.

    Args: ``raw`` — what ``GET /version`` or a container tag gave (may be None).
    Returns: :class:`VersionInfo`; ``version`` None when it cannot be known.
    """
    if raw is None or not str(raw).strip():
        return VersionInfo(None, raw, "no version reported")
    text = str(raw).strip()
    prefix, tag = "", text
    image = _IMAGE_RE.match(text.split("@", 1)[0])
    if image:
        tag, prefix = image["tag"], f"container tag '{image['tag']}' of {image['repo']}: "
    lowered = tag.lower()
    direct = _from_pep440(lowered[1:] if lowered.startswith("v") else lowered, text, prefix)
    if direct is not None:
        return direct
    if lowered in _UNKNOWN_TAGS:
        return VersionInfo(None, text, f"{prefix}floating tag '{tag}': version unknown")
    # A commit id (has a hex letter): its digits are no date.
    if re.fullmatch(r"nightly-(?=[0-9]*[a-f])[0-9a-f]{7,40}", lowered):
        return VersionInfo(None, text, f"{prefix}nightly build of commit {lowered[8:]}: "
                           "version unknown", True, True)
    if "nightly" in lowered:
        return _from_dated_tag(lowered, text, prefix, nightly=True)
    embedded = _EMBEDDED_RE.search(lowered)
    if embedded:
        found = _from_pep440(embedded[1], text, f"{prefix}version embedded in '{tag}': ")
        if found is not None:
            return found
    # A bare word is a pre-release image tag only when it could be one (no whitespace) and has
    # a digit to carry a date or version: "not stated" / "unknown" are no tag at all.
    if image or (re.fullmatch(r"[\w.\-+]+", lowered) and re.search(r"[a-z]", lowered)
                 and re.search(r"\d", lowered)):
        return _from_dated_tag(lowered, text, prefix, nightly=False)
    return VersionInfo(None, text, f"unrecognised version string '{text}'")


def version_tuple(version: str | None) -> Version | None:
    """``packaging`` Version of a normalised string, or None (helper for comparisons)."""
    if version is None:
        return None
    try:
        return Version(version)
    except InvalidVersion:
        return None
