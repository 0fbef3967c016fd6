"""Readable names for the sources rules cite (``references:`` of audit/rules/*.yaml).

A reference is an ``https://`` URL or ``seed:<file>#<section>``: a section of one of the
operating-point recipes in ``demo/data/seeds/`` (docs/knowledge-base.md, "references").
Users do not have the seed files by name, so pages and text output show the recipe's title
and the section instead of the file name. Pure Python, no Django.
"""

from __future__ import annotations

from typing import NamedTuple

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
    """How to show one reference: ``https://…`` stays a link; ``seed:<file>#<section>``
    becomes ``Recipe "<title>", section "<section>"``; anything else is shown as written."""
    if ref.startswith("https://"):
        return Reference(ref, ref)
    if ref.startswith("seed:"):
        name, _, section = ref[len("seed:"):].partition("#")
        title = SEED_TITLES.get(name, f"operating-point recipe {name}")
        text = f"Recipe \u201c{title}\u201d"
        return Reference(f"{text}, section \u201c{section}\u201d" if section else text, None)
    return Reference(ref, None)


def readable(ref: str) -> str:
    """:func:`describe`'s text (for plain-text output)."""
    return describe(ref).text
