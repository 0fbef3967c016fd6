"""``manage.py audit_snapshot FILE [FILE...] --format json|text [--history]``.

Evaluates contract report files offline with the rules knowledge base and prints
``{"reports": [{"file", "hostname", "servers": [{"pid", "base_url", "findings": [...]}]}]}``
(see audit.kb.snapshot). Never touches the database and skips system checks, so it runs
on a fresh clone with no environment. Exit 0 when evaluated, 2 on unreadable or invalid
input (the reason goes to stderr), 1 when the rule files do not load.
"""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand

from audit.kb import snapshot


class Command(BaseCommand):
    """Thin wrapper over :func:`audit.kb.snapshot.run`."""

    help = "Evaluate agent report files offline against the rules knowledge base."
    requires_system_checks: list[str] = []
    requires_migrations_checks = False

    def add_arguments(self, parser: Any) -> None:
        snapshot.build_parser(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        code = snapshot.run(options["files"], options["format"], options["history"],
                            out=self.stdout, err=self.stderr, rules=options["rules"])
        if code:
            sys.exit(code)
