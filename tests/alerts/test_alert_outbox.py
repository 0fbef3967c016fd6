"""The outbox mechanics: claims, the beat sweep, the dispatch debounce."""

from __future__ import annotations

from datetime import timedelta

import pytest
from alertkit import ChannelFactory, FindingEventFactory, FindingFactory
from django.utils import timezone

from alerts import alert_sending
from alerts.alert_tasks import schedule_dispatch, sweep
from alerts.alerts import create_test_delivery, dispatch
from alerts.models import Delivery
from audit.models import FindingEvent

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("allow_local")]


def test_a_delivery_whose_task_runs_twice_is_sent_once(receiver):
    delivery = create_test_delivery(ChannelFactory(destination=receiver.url))

    assert alert_sending.send(delivery.pk).status == "sent"
    assert alert_sending.send(delivery.pk).status == "skipped"

    assert len(receiver.requests) == 1


def test_a_claim_held_by_a_live_worker_is_not_taken_over(receiver):
    delivery = create_test_delivery(ChannelFactory(destination=receiver.url))
    Delivery.objects.filter(pk=delivery.pk).update(status="sending", claimed_at=timezone.now())

    assert alert_sending.send(delivery.pk).status == "skipped"
    assert receiver.requests == []


def test_a_delivery_for_a_channel_disabled_meanwhile_is_not_sent(receiver):
    channel = ChannelFactory(destination=receiver.url)
    FindingEventFactory(finding=FindingFactory())

    [delivery_id] = dispatch()
    channel.enabled = False
    channel.save()

    assert alert_sending.send(delivery_id).status == "failed"
    assert receiver.requests == []
    assert "disabled" in Delivery.objects.get(pk=delivery_id).error


def test_the_sweep_dispatches_old_events_and_resends_lost_deliveries(
        receiver, eager, django_capture_on_commit_callbacks):
    channel = ChannelFactory(destination=receiver.url)
    FindingEventFactory(finding=FindingFactory(), at=timezone.now() - timedelta(minutes=5))
    young = FindingEventFactory(finding=FindingFactory())
    lost = create_test_delivery(channel)
    Delivery.objects.filter(pk=lost.pk).update(created_at=timezone.now() - timedelta(hours=1))

    with django_capture_on_commit_callbacks(execute=True):
        result = sweep()

    assert result == {"deliveries": 1, "requeued": 1}
    assert sorted(r.json()["trigger"] for r in receiver.requests) == ["new_finding", "test"]
    young.refresh_from_db()
    assert young.dispatched_at is None  # left to the dispatch its own commit scheduled


def test_dispatch_is_scheduled_once_per_group_window(receiver, eager,
                                                     django_capture_on_commit_callbacks):
    ChannelFactory(destination=receiver.url)
    FindingEventFactory(finding=FindingFactory())

    with django_capture_on_commit_callbacks(execute=True):
        assert schedule_dispatch() is True
        FindingEventFactory(finding=FindingFactory())
        assert schedule_dispatch() is False

    assert len(receiver.requests) == 1
    assert FindingEvent.objects.filter(dispatched_at=None).count() == 1  # for the next run
