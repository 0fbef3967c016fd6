"""System checks of the audit app; ids ``audit.E00x``."""

from __future__ import annotations

from typing import Any

from django.core.checks import Error, register


@register()
def check_rules_load(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """audit.E001: every rule file must load (the error names the file and rule)."""
    from audit.kb.engine import RuleError
    from audit.rulebook import current_knowledge_base

    try:
        current_knowledge_base()
    except RuleError as exc:
        return [Error(f"rules knowledge base does not load: {exc}",
                      hint="Fix the rule, then run `python manage.py load_rules`.",
                      id="audit.E001")]
    return []
