"""Template filters for fleet pages."""

from __future__ import annotations

import shlex

from django import template

register = template.Library()


@register.filter
def ago(seconds: int | None) -> str:
    """Render an age in seconds as ``42 s ago``, ``5 min ago``, ``3 h ago`` or ``never``."""
    if seconds is None:
        return "never"
    if seconds < 120:
        return f"{seconds} s ago"
    if seconds < 7200:
        return f"{seconds // 60} min ago"
    if seconds < 172800:
        return f"{seconds // 3600} h ago"
    return f"{seconds // 86400} d ago"


@register.filter
def gib(num_bytes: int | None) -> str:
    """Bytes as GiB with one decimal (``79.6 GiB``), or an em dash when unknown."""
    if num_bytes is None:
        return "—"
    return f"{num_bytes / 2**30:.1f} GiB"


@register.filter
def seen_ago(host: object) -> str:
    """``ago`` of ``host.seconds_since_seen()``."""
    return ago(host.seconds_since_seen())  # type: ignore[attr-defined]


@register.filter
def shell_words(argv: list | None) -> str:
    """An argv list (agent data) as one POSIX shell line, each token through
    :func:`shlex.quote`, so pasting it runs nothing it quotes (``$(…)``, backticks, ``;``)."""
    return " ".join(shlex.quote(str(token)) for token in argv or [])
