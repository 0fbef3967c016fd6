"""From agent reports to one alert: an upgrade to 0.30.0 that does not come back.

Reports go through the real ingest API and the real evaluation against the shipped rules;
the crash-loop finding's event goes through the outbox to a webhook and an email channel.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from alertkit import ChannelFactory

from alerts.models import Delivery
from audit import evaluation
from audit.crashloop import CRASH_LOOP_RULE_ID
from audit.rulebook import sync_rules
from tests.conftest import iso

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("allow_local")]

START = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)
DATA = json.loads((Path(__file__).parents[1] / "data" / "failed_start_lines.json").read_text())
HEAD_DIM_RULE = "upm-gemma4-transformers-515-head-dim"
LINE = next(r["line"] for r in DATA["lines"] if r["rule_id"] == HEAD_DIM_RULE)


@pytest.fixture
def report(enrolled, post_report, make_report):
    """POST and evaluate a report ``minutes`` after START; ``restarts`` sends the server as a
    failed systemd start with that restart count instead of a running server."""
    _, token = enrolled()

    def send(minutes: int, restarts: int | None = None, **server) -> None:
        body = make_report(server=server, collected_at=iso(START + timedelta(minutes=minutes)))
        if restarts is not None:
            body["failed_starts"] = [{
                "source": "systemd", "unit_or_container": "vllm.service",
                "argv": body["servers"][0]["argv"], "restart_count": restarts, "exit_code": 1,
                "last_exit_at": iso(START + timedelta(minutes=minutes, seconds=-3)),
                "state": "activating/auto-restart", "lines": [LINE]}]
            body["servers"] = []
        assert post_report(body, token).status_code == 202
        evaluation.evaluate_report(body["report_id"])
    return send


def test_an_upgrade_that_crash_loops_alerts_once_as_a_risky_upgrade(
        report, receiver, smtp, run_dispatch):
    sync_rules()
    ChannelFactory(kind="webhook", destination=receiver.url)
    ChannelFactory(kind="email", destination="oncall@example.com", secret="")
    report(0, vllm_version="0.26.0", installed_vllm_version="0.26.0")
    report(1, vllm_version="0.26.0", installed_vllm_version="0.27.1")
    run_dispatch()
    receiver.requests.clear()
    smtp.messages.clear()

    report(2, restarts=2)
    report(3, restarts=5)
    report(4, restarts=8)
    run_dispatch()

    loops = [r.json() for r in receiver.requests if r.json()["trigger"] == "risky_upgrade"]
    [body] = loops
    [item] = [i for i in body["items"] if i["findings"][0]["rule_id"] == CRASH_LOOP_RULE_ID]
    assert item["headline"].startswith("Risky upgrade did not come back")
    assert "0.26.0" in item["detail"] and "0.27.1" in item["detail"]
    assert "per-layer attribute" in item["detail"]
    assert any("Risky upgrade" in m["Subject"] for m in smtp.messages)

    receiver.requests.clear()
    report(5, restarts=11)  # the same loop goes on: no second alert
    run_dispatch()
    assert not [r for r in receiver.requests if r.json()["trigger"] == "risky_upgrade"]
    assert Delivery.objects.filter(status=Delivery.Status.SENT).exists()
