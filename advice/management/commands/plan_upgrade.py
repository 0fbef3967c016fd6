"""``manage.py plan_upgrade FILE... --target VERSION [--target V2 …] [--model M]
--format json|text``: offline upgrade planner (advice.planner) for report files.

JSON: ``{"plans": [per server and target], "pending": [installed != running, "will
become X on next restart"], "fleet": [{"target", "servers", "blocked", "risky", "safe",
"breaks"}]}``. Exit 2 on invalid input or target, 1 when the rule files do not load.
"""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand

from advice.recommend import cli


class Command(BaseCommand):
    """Thin wrapper over :func:`advice.recommend.cli.run_plan`."""

    help = "What an upgrade to a vLLM version would do to each server of the report files."
    requires_system_checks: list[str] = []
    requires_migrations_checks = False

    def add_arguments(self, parser: Any) -> None:
        cli.plan_parser(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        code = cli.run_plan(options["files"], options["target"], options["model"],
                            options["format"], out=self.stdout, err=self.stderr,
                            rules=options["rules"])
        if code:
            sys.exit(code)
