"""``manage.py build_agent_wheel [--force]``: build the agent wheel served at /agent/dist/."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from fleet.agent_dist import build_agent_wheel


class Command(BaseCommand):
    """Build var/dist/vllm_fleet_agent-<version>-py3-none-any.whl with pip."""

    help = "Build the node agent wheel that /agent/dist/ serves."
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--force", action="store_true", help="rebuild even if present")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            path = build_agent_wheel(force=options["force"])
        except RuntimeError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(str(path))
