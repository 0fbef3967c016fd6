"""Readable names for the sources rules cite (``references:`` of audit/rules/*.yaml).

A reference is an ``https://`` URL or ``seed:<file>#<section>``: a section of one of the
operating-point recipes in ``demo/data/seeds/`` (docs/knowledge-base.md, "references").
Users do not have the seed files by name, so pages and text output show the recipe's title
and the section instead of the file name. Pure Python, no Django.
"""

from __future__ import annotations

import re
from typing import NamedTuple
from urllib.parse import unquote, urlsplit

#: Seed file -> the recipe's own title (first heading of each file in demo/data/seeds/).
SEED_TITLES = {
    "000_ffb301503ad246f2.txt": "Gemma 4 31B on vLLM, operating-point reference "
                                "(2x H100 SXM5, vLLM 0.20-0.25.1)",
    "001_97558c7218f56b5c.txt": "Gemma 4 31B on vLLM, NVFP4 + EAGLE3 at concurrency 1 "
                                "(measured run)",
    "003_680bab14e519c987.txt": "Gemma 4 26B-A4B on vLLM, NVFP4 + MTP at concurrency 256 "
                                "(the collapse, measured run)",
}


class Reference(NamedTuple):
    """``text`` to show; ``url`` to link (None for a seed recipe section)."""

    text: str
    url: str | None


def describe(ref: str) -> Reference:
    """How to show one reference: ``seed:<file>#<section>`` becomes ``Recipe "<title>",
    section "<section>"``; an ``https://`` URL stays a link whose text names the source
    (:func:`url_text`: "vllm issue #123"); anything else is shown as written."""
    if ref.startswith("https://"):
        return Reference(url_text(ref), ref)
    if ref.startswith("seed:"):
        name, _, section = ref[len("seed:"):].partition("#")
        title = SEED_TITLES.get(name, f"operating-point recipe {name}")
        text = f"Recipe \u201c{title}\u201d"
        return Reference(f"{text}, section \u201c{section}\u201d" if section else text, None)
    return Reference(ref, None)


_GITHUB = re.compile(r"https://github\.com/([^/]+)/([^/#?]+)(?:/(issues|pull|discussions)/(\d+)"
                     r"|/releases(?:/tag/([^/#?]+))?|/(?:blob|tree)/[^/]+/([^#?]+))?")
_KINDS = {"issues": "issue", "pull": "PR", "discussions": "discussion"}


def url_text(url: str) -> str:
    """A link's text: the repository and issue/PR number for GitHub (``vllm issue #123``,
    ``vllm PR #45``, ``QwenLM/Qwen3 issue #7``; repositories of vllm-project by name
    alone), "vllm release v0.11.0", "vllm source vllm/x.py", "vLLM docs: features/…";
    other URLs as host and path without the scheme."""
    m = _GITHUB.fullmatch(url.rstrip("/"))
    if m:
        owner, repo, kind, number, tag, path = m.groups()
        name = repo if owner == "vllm-project" else f"{owner}/{repo}"
        if kind:
            return f"{name} {_KINDS[kind]} #{number}"
        if tag:
            return f"{name} release {unquote(tag)}"
        if path:
            return f"{name} source {unquote(path)}"
        if url.rstrip("/").endswith("/releases"):
            return f"{name} releases"
        return name
    parts = urlsplit(url)
    path = unquote(parts.path).strip("/")
    if parts.netloc == "docs.vllm.ai":
        page = re.sub(r"^en/[^/]+/", "", path).removesuffix(".html").removesuffix("/index")
        return f"vLLM docs: {page or 'home'}" + (f" #{parts.fragment}" if parts.fragment else "")
    return f"{parts.netloc}/{path}" if path else parts.netloc


def readable(ref: str) -> str:
    """:func:`describe`'s text for plain-text output (a URL follows its name)."""
    shown = describe(ref)
    return f"{shown.text} <{shown.url}>" if shown.url else shown.text
