"""``manage.py recommend FILE [--workload chat|long-context|mixed|latency] --format json|text``.

Prints the recommended vLLM command(s) and the per-flag diff for every server of one
contract report file, offline (no database, no system checks). JSON shape:
``{"servers": [{"pid", "layout", "replicas": [{"argv", "gpus"}], "diff": [{"flag",
"current", "recommended", "reason", "references"}], "notes"}]}``. Exit 2 on invalid input,
1 when the rule files do not load (see advice.recommend.cli).
"""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand

from advice.recommend import cli


class Command(BaseCommand):
    """Thin wrapper over :func:`advice.recommend.cli.run_recommend`."""

    help = "Recommended vLLM configuration for each server of a report file (offline)."
    requires_system_checks: list[str] = []
    requires_migrations_checks = False

    def add_arguments(self, parser: Any) -> None:
        cli.recommend_parser(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        code = cli.run_recommend(options["file"], options["workload"], options["format"],
                                 out=self.stdout, err=self.stderr, rules=options["rules"])
        if code:
            sys.exit(code)
