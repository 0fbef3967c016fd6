"""Fixtures of the dashboard tests: one user per role and a small demo fleet seeded
through the real ingest API (the demo sample reports) and evaluated by the real rules."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

FIXTURES = Path(__file__).resolve().parents[2] / "fleet" / "fixtures"
PASSWORD = "pw-for-dashboard-tests"  # noqa: S105 (test-only credential)


@pytest.fixture
def role_user(db: None) -> Callable[[str], Any]:
    """``role_user("viewer"|"operator"|"admin")`` -> a user in that role (password PASSWORD)."""
    from django.contrib.auth import get_user_model

    from fleet.access import set_role

    def make(role: str) -> Any:
        user = get_user_model().objects.create_user(f"{role}-user", password=PASSWORD)
        set_role(user, role)
        return user
    return make


def fresh(report: dict[str, Any]) -> dict[str, Any]:
    """A sample report with a new report_id and current timestamps."""
    now = timezone.now().isoformat().replace("+00:00", "Z")
    body = json.loads(json.dumps(report))
    body["report_id"], body["collected_at"] = str(uuid.uuid4()), now
    for server in body["servers"]:
        if server.get("metrics"):
            server["metrics"]["scraped_at"] = now
    return body


@pytest.fixture
def demo_fleet(enrolled: Callable, post_report: Callable, db: None
               ) -> dict[str, Any]:
    """The three demo hosts posted through /api/v1/reports and evaluated; the first
    host also gets 6 h of 30 s metric/GPU samples (TTFT absent, as on an old vLLM) with
    the agent down from 3 h to 2 h ago.
    Returns ``{"hosts": [Host, ...], "reports": [report_id, ...]}``."""
    from audit.evaluation import evaluate_report
    from bench import fleetgen
    from fleet.models import Host
    from fleet.recording import derive_report

    hosts, reports = [], []
    for path in sorted(FIXTURES.glob("*.json")):
        sample = json.loads(path.read_text())
        host, token = enrolled(machine_id=sample["host"]["machine_id"],
                               hostname=sample["host"]["hostname"])
        body = fresh(sample)
        answer = post_report(body, token=token)
        assert answer.status_code == 202, answer.content
        derive_report(body["report_id"])  # the worker's first step (idempotent), then evaluate
        evaluate_report(body["report_id"])
        hosts.append(Host.objects.get(pk=host.pk))
        reports.append(body["report_id"])
    now = timezone.now()
    fleetgen.backfill(hosts[0], hours=6, missing=("ttft",), spec_rate=0.45,
                      gap=(now - timedelta(hours=3), now - timedelta(hours=2)))
    return {"hosts": hosts, "reports": reports}
