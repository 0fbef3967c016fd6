"""The fixes index from GitHub's REST API: a release's notes list its merged PRs, a PR its
files. Used by ``manage.py vllm_fixes --release TAG`` to extend the shipped index when a new
release is added.

Requests (GitHub REST docs): ``GET /repos/vllm-project/vllm/releases/tags/<tag>`` (body =
the release notes, Markdown with ``#NNNN`` / ``/pull/NNNN`` links), ``GET
/repos/vllm-project/vllm/pulls/<n>`` (``title``, ``merged_at``) and ``.../pulls/<n>/files``
(``filename`` of each changed file, first page). The client, conditional requests and the
rate-limit pause are :mod:`audit.upstream`'s: a 403/429 with the limit used up stops the run
(:class:`audit.upstream._Stop`) and nothing is called before GitHub's reset time.

Only lines of the notes that read as bug fixes (``fix``/``bugfix`` in the line) are read,
and only PRs whose tags (:func:`audit.kb.fixes.tag`) name a specific feature are kept.
"""

from __future__ import annotations

import re
from typing import Any

import httpx

from audit.kb.fixes import SCOPES, SUBJECTS, tag
from audit.upstream import _pause_if_limited, _Stop

REPO = "vllm-project/vllm"
_PR_RE = re.compile(r"(?:/pull/|#)(\d{3,6})\b")
_FIX_RE = re.compile(r"\b(bug ?fix|fix(es|ed)?)\b", re.IGNORECASE)


def _get(client: httpx.Client, path: str) -> Any:
    try:
        response = client.get(path)
    except httpx.HTTPError as exc:
        raise _Stop(f"network error: {exc}") from exc
    _pause_if_limited(response)
    if response.status_code != 200:
        raise _Stop(f"{path} answered HTTP {response.status_code}")
    return response.json()


def fix_numbers(notes: str) -> list[int]:
    """PR numbers on the fix lines of release notes, in order, once each."""
    found: list[int] = []
    for line in notes.splitlines():
        if _FIX_RE.search(line):
            found += [int(n) for n in _PR_RE.findall(line)]
    return list(dict.fromkeys(found))


def release_fixes(client: httpx.Client, tag_name: str, limit: int = 200) -> list[dict]:
    """Index entries (fixes.json shape) for the fix PRs a release's notes list; ``date`` is
    GitHub's ``merged_at`` day (``date_kind`` "merged"). Raises ``_Stop`` on a rate limit,
    a network error or a non-200 answer."""
    notes = _get(client, f"/repos/{REPO}/releases/tags/{tag_name}").get("body") or ""
    entries = []
    for number in fix_numbers(notes)[:limit]:
        pull = _get(client, f"/repos/{REPO}/pulls/{number}")
        if not pull.get("merged_at"):
            continue
        files = [f.get("filename", "") for f in _get(client,
                                                     f"/repos/{REPO}/pulls/{number}/files")]
        features = tag(str(pull.get("title") or ""), files)
        if not any(features.get(k) for k in SUBJECTS) and not features.get("arch"):
            continue  # no specific feature: it could touch anyone (precision first)
        entries.append({"number": number, "title": pull.get("title"),
                        "url": f"https://github.com/{REPO}/pull/{number}",
                        "date": str(pull["merged_at"])[:10], "date_kind": "merged",
                        "source": f"GitHub REST API, release notes of {tag_name}",
                        "features": {k: v for k, v in features.items()
                                     if k in SUBJECTS + SCOPES}})
    return entries
