"""Real ``celery worker -Q alerts`` processes on real Redis and the committed test database."""

from __future__ import annotations

import time

import pytest
from alertkit import HOLD, ChannelFactory, FindingFactory, ServerFactory, upgrade_event, wait_for

from alerts.alert_tasks import dispatch_events
from alerts.models import Delivery

pytestmark = [pytest.mark.worker, pytest.mark.slow]

#: Longer than the test worker's visibility timeout (3 s) plus its restore sweep (1 s):
#: a duplicate redelivery would have arrived by then.
QUIET_S = 6


def _risky_upgrade() -> None:
    server = ServerFactory()
    upgrade_event(server, [FindingFactory(server=server)])


def _delivery_status(delivery: Delivery) -> str:
    delivery.refresh_from_db()
    return delivery.status


def test_a_worker_retries_a_failing_receiver_until_it_accepts(workers, receiver):
    receiver.answer((500, {}, b"down"), (503, {"Retry-After": "1"}, b"down"), (200, {}, b"ok"))
    channel = ChannelFactory(kind="webhook", destination=receiver.url)
    _risky_upgrade()
    workers.start()

    assert dispatch_events() == 1

    delivery = Delivery.objects.get(channel=channel)
    assert wait_for(lambda: _delivery_status(delivery) == "sent"), workers.logs()
    assert len(receiver.requests) == 3
    assert delivery.attempts == 3
    assert list(delivery.attempt_log.values_list("response_code", flat=True)) == [500, 503, 200]


def test_a_worker_killed_before_sending_leads_to_exactly_one_message(workers, receiver):
    channel = ChannelFactory(kind="gated-webhook", destination=receiver.url)
    _risky_upgrade()
    first = workers.start()

    assert dispatch_events() == 1
    assert wait_for(lambda: any(workers.gate_dir.glob("entered-*"))), workers.logs()
    workers.kill9(first)  # it claimed the delivery and is about to send
    assert receiver.requests == []
    (workers.gate_dir / "open").touch()
    workers.start()

    delivery = Delivery.objects.get(channel=channel)
    assert wait_for(lambda: _delivery_status(delivery) == "sent"), workers.logs()
    time.sleep(QUIET_S)
    assert len(receiver.requests) == 1
    delivery.refresh_from_db()
    assert delivery.attempts == 2 and delivery.possible_duplicate
    assert list(delivery.attempt_log.values_list("outcome", flat=True)) == ["lost", "sent"]


def test_a_worker_killed_after_sending_causes_one_duplicate_that_the_log_shows(
        workers, receiver):
    receiver.answer((HOLD, {}, b""), (200, {}, b"ok"))  # receive, then never answer
    channel = ChannelFactory(kind="webhook", destination=receiver.url)
    _risky_upgrade()
    first = workers.start()

    assert dispatch_events() == 1
    assert wait_for(lambda: len(receiver.requests) == 1), workers.logs()
    workers.kill9(first)  # it sent, but dies before recording the outcome
    workers.start()

    delivery = Delivery.objects.get(channel=channel)
    assert wait_for(lambda: _delivery_status(delivery) == "sent"), workers.logs()
    time.sleep(QUIET_S)
    assert len(receiver.requests) == 2
    first_id, second_id = (r.headers["X-Fleet-Delivery"] for r in receiver.requests)
    assert first_id == second_id == str(delivery.code)  # receivers can drop the repeat
    delivery.refresh_from_db()
    assert delivery.possible_duplicate
    assert list(delivery.attempt_log.values_list("outcome", flat=True)) == ["lost", "sent"]
