"""From agent reports to one alert: a host moves from vLLM 0.25.1 to 0.27.0.

Reports go through the real ingest API and the real evaluation against the
shipped rules; only the alert side is under test here.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from alertkit import ChannelFactory

from alerts.models import Delivery
from audit import evaluation
from audit.models import Rule
from audit.rulebook import sync_rules
from tests.conftest import iso

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("allow_local")]

START = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)


@pytest.fixture
def report(enrolled, post_report, make_report):
    """POST and evaluate a report taken ``minutes`` after START with ``server`` overrides."""
    _, token = enrolled()

    def send(minutes: int, **server) -> None:
        body = make_report(server=server, collected_at=iso(START + timedelta(minutes=minutes)))
        assert post_report(body, token).status_code == 202
        evaluation.evaluate_report(body["report_id"])
    return send


def test_moving_from_0_25_1_to_0_27_0_sends_one_risky_upgrade_per_channel(
        report, receiver, smtp, run_dispatch):
    sync_rules()
    ChannelFactory(kind="webhook", destination=receiver.url)
    ChannelFactory(kind="email", destination="oncall@example.com", secret="")
    report(0, vllm_version="0.25.1", installed_vllm_version="0.25.1")
    run_dispatch()  # the first report's findings are pre-existing: no alert
    assert receiver.requests == [] and smtp.messages == []

    report(1, pid=4321, vllm_version="0.27.0", installed_vllm_version="0.27.0")
    run_dispatch()

    [request] = receiver.requests
    body = request.json()
    assert body["trigger"] == "risky_upgrade"
    [item] = body["items"]
    assert item["headline"] == "vLLM 0.25.1 → 0.27.0"
    listed = {f["rule_id"]: f for f in item["findings"]}
    assert "gemma4-version-ceiling" in listed
    for rule_id, ref in listed.items():
        assert ref["fixed_in"] == (Rule.objects.get(rule_id=rule_id).fixed_in or "")
    [mail] = smtp.messages
    assert "Risky upgrade" in mail["Subject"]
    assert Delivery.objects.filter(status=Delivery.Status.SENT).count() == 2
