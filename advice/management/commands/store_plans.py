"""``manage.py store_plans``: store the upgrade plans of every running server now.

The worker stores a server's plans when its configuration is evaluated
(:mod:`advice.plans`); a fleet that was evaluated before plans were stored (an upgrade of
this code) has none until each server's next configuration change, and its planner pages
plan on the visit meanwhile (bounded). This fills them at once from each server's latest
report. Prints how many servers and configurations were planned.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from advice.plans import store_plans
from fleet.models import Server


class Command(BaseCommand):
    """Plan every running server from its latest stored report."""

    help = "Store the upgrade plans of every running server (after an upgrade of this code)."

    def handle(self, *args: Any, **options: Any) -> None:
        by_report: dict[str, list[int]] = {}
        for pk, report_id in Server.objects.filter(is_running=True, last_report__isnull=False) \
                .values_list("pk", "last_report__report_id"):
            by_report.setdefault(str(report_id), []).append(pk)
        evaluated = sum(store_plans(report_id, ids) for report_id, ids in by_report.items())
        servers = sum(map(len, by_report.values()))
        self.stdout.write(f"planned {servers} servers ({evaluated} configuration(s) evaluated)")
