"""Template filters for fleet pages."""

from __future__ import annotations

from datetime import UTC, datetime

from django import template
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.html import format_html

from fleet_agent import shellwords

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
    :func:`fleet_agent.shellwords.quote`, so pasting it runs nothing it quotes (``$(…)``,
    backticks, ``;``) and carries no control character to the terminal (ESC, ^U, newline)."""
    return shellwords.join(argv or [])


@register.filter
def when(value: datetime | str | None) -> str:
    """A time (datetime, or an ISO string from an agent) as local readable time and age:
    ``<time datetime=ISO title=ISO>2026-12-01 10:52 UTC · 3 min ago</time>``; "unknown"
    when missing, the text itself (escaped) when it is not a time."""
    if value in (None, ""):
        return "unknown"
    at = value if isinstance(value, datetime) else parse_datetime(str(value))
    if at is None:
        return str(value)
    if timezone.is_naive(at):
        at = timezone.make_aware(at, UTC)
    local = timezone.localtime(at)
    age = int((timezone.now() - at).total_seconds())
    relative = ago(age) if age >= 0 else "in the future"
    iso = at.replace(microsecond=0).isoformat()
    return format_html('<time datetime="{}" title="{}">{} · {}</time>', iso, iso,
                       local.strftime("%Y-%m-%d %H:%M %Z"), relative)


@register.filter
def count(value: object) -> str:
    """A big count with separators (``262144`` -> "262,144"); other values unchanged."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "—" if value is None else str(value)
    return f"{value:,.0f}"
