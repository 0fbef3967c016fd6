"""``manage.py load_rules [--check] [PATH...]``: validate the rules and load them.

Loads every rule file (default: ``AUDIT_RULES_DIR`` or audit/rules/), refusing with
exit 1 and the file + rule id of the first invalid rule. Without ``--check`` it then
mirrors the rules into the database (admin and knowledge-base pages) and, when the
content-hash version is new, queues every host's latest report for re-evaluation.
Idempotent: running it twice on the same files changes nothing the second time.
"""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand

from audit.kb.engine import RuleError, load_rules


class Command(BaseCommand):
    """Validate the rules knowledge base, mirror it into the database, re-evaluate."""

    help = "Validate the rules knowledge base, load it into the database, re-evaluate hosts."
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("paths", nargs="*", help="rule files or folders to validate")
        parser.add_argument("--check", action="store_true",
                            help="only validate and print the version; touch no database")

    def handle(self, *args: Any, **options: Any) -> None:
        from audit.rulebook import current_knowledge_base, requeue_fleet, sync_rules

        try:
            kb = load_rules(options["paths"]) if options["paths"] else current_knowledge_base()
        except RuleError as exc:
            self.stderr.write(f"load_rules: {exc}")
            sys.exit(1)
        self.stdout.write(f"knowledge base {kb.version}: {len(kb.rules)} rules from "
                          f"{len(kb.files)} files (verified through vLLM {kb.verified_through})")
        if options["check"] or options["paths"]:
            return
        version, is_new = sync_rules(kb)
        queued = requeue_fleet(version) if is_new else 0
        state = "new version" if is_new else "unchanged"
        self.stdout.write(f"{state}; {queued} host report(s) queued for re-evaluation")
