"""Template filters for knowledge-base content on pages."""

from __future__ import annotations

from django import template
from django.utils.html import format_html

from audit.kb import labels
from audit.kb.sources import describe

register = template.Library()


@register.filter
def reference(ref: str) -> str:
    """A rule reference as HTML: a link named by its source and number ("vllm issue #123",
    the URL in the title) for a URL, the recipe title and section for a seed."""
    shown = describe(str(ref))
    if shown.url:
        return format_html('<a href="{}" rel="noopener noreferrer" title="{}">{}</a>',
                           shown.url, shown.url, shown.text)
    return format_html('<span class="muted">{}</span>', shown.text)


@register.filter
def placeholders_as_words(text: str) -> str:
    """A rule message template for reading without a server: ``{gpu_memory_gib}`` becomes
    "the GPU memory GiB", ``{version}`` "the vLLM version" (raw placeholders
    leaked onto rule pages). Format specs (``{x:.1f}``) drop with the braces."""
    import re

    words = {"version": "the vLLM version", "model": "the model", "gpu": "the GPU"}

    def word(match: re.Match[str]) -> str:
        name = match.group(1)
        return f"‹{words.get(name, 'the ' + name.replace('_', ' '))}›"

    return re.sub(r"\{([a-z_][a-z0-9_]*)(?:![rsa])?(?::[^{}]*)?\}", word, str(text))


@register.filter
def label(name: str) -> str:
    """A finding kind or alert trigger in words (``known_issue`` -> "Known issue")."""
    return labels.label(str(name))


@register.filter
def evidence_rows(evidence: dict | None) -> list[tuple[str, str, str]]:
    """A finding's evidence as ``[(key, label, value text)]`` (audit/kb/labels.py)."""
    return labels.evidence_rows(evidence if isinstance(evidence, dict) else {})
