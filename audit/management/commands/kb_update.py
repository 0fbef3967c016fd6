"""``manage.py kb_update FILE_OR_HTTPS_URL``: install a signed knowledge-base bundle.

Verifies the Ed25519 signature against ``AUDIT_KB_PUBLIC_KEYS``, validates every rule as
``load_rules`` does, refuses a bundle not newer than the active one, swaps it in atomically
and queues every host's latest report for re-evaluation (see :mod:`audit.kb_store`).
Exit 1 with the reason on any refusal; nothing changes then.
"""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand

from audit.kb.bundle import BundleError


class Command(BaseCommand):
    """Install a signed knowledge-base bundle from a file or an https URL."""

    help = "Verify and install a signed knowledge-base bundle (file or https URL)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("source", help="bundle file path or https:// URL")

    def handle(self, *args: Any, **options: Any) -> None:
        from audit.kb_store import install

        try:
            result = install(options["source"])
        except BundleError as exc:
            self.stderr.write(f"kb_update: refused: {exc}")
            sys.exit(1)
        from django.conf import settings

        if settings.AUDIT_RULES_DIR:
            self.stderr.write(f"kb_update: warning: AUDIT_RULES_DIR={settings.AUDIT_RULES_DIR} "
                              f"is set and still wins over the bundle's rules (data tables "
                              f"come from the bundle)")
        self.stdout.write(f"knowledge base {result.version} active (rules "
                          f"{result.rules_version[:12]}); {result.queued} host report(s) "
                          f"queued for re-evaluation")
