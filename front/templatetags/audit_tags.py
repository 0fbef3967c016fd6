"""Template filters for knowledge-base content on pages."""

from __future__ import annotations

from django import template
from django.utils.html import format_html

from audit.kb.sources import describe

register = template.Library()


@register.filter
def reference(ref: str) -> str:
    """A rule reference as HTML: a link for a URL, the recipe title and section for a seed."""
    shown = describe(str(ref))
    if shown.url:
        return format_html('<a href="{}" rel="noopener noreferrer">{}</a>', shown.url, shown.text)
    return format_html('<span class="muted">{}</span>', shown.text)
