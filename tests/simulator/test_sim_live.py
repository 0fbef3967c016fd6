"""The simulator against a live dashboard: enrollment, valid reports, the timeline's story.

Everything reaches the database through ``POST /api/v1/enroll`` and ``/api/v1/reports``
(pytest-django's ``live_server`` on PostgreSQL); evaluation runs eagerly in the server.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from django.core import mail
from django.core.management import CommandError, call_command

from alerts.models import AlertChannel, Delivery, Trigger
from audit.models import Finding, FindingEvent
from demo.receiver import WebhookReceiver
from demo.timeline import TIMELINE, Event
from fleet.models import Host, Report

pytestmark = pytest.mark.django_db(transaction=True)


def _active(hostname: str) -> set[str]:
    return set(Finding.objects.active().filter(host__hostname=hostname)
               .values_list("rule_id", flat=True))


def _events(hostname: str, kind: str) -> list[FindingEvent]:
    return list(FindingEvent.objects.filter(host__hostname=hostname, kind=kind))


def test_one_round_enrolls_every_host_and_posts_a_valid_report_each(eager_dashboard,
                                                                    tmp_path: Path):
    call_command("simulate_fleet", url=eager_dashboard, once=True, sim_dir=str(tmp_path),
                 no_beat=True, wait=10)
    hosts = Host.objects.count()
    assert hosts >= 35
    assert Report.objects.count() == hosts  # one report per host, all accepted
    assert Report.objects.filter(evaluated_at=None).count() == 0
    assert Host.objects.filter(hostname="case038-tesla-v100-16gb").exists()
    assert Finding.objects.active().filter(host__hostname="case009-unknown-gpu",
                                           rule_id="up-tp-not-dividing-attention-heads").exists()


def test_the_simulator_refuses_a_dashboard_that_is_not_on_loopback(tmp_path: Path):
    with pytest.raises(CommandError, match="loopback"):
        call_command("simulate_fleet", url="http://10.1.2.3:8000", once=True,
                     sim_dir=str(tmp_path))


def _play(sim, rounds: int, pause: float = 0.3) -> None:
    for _ in range(rounds):
        sim.run_round()
        time.sleep(pause)


def test_the_timeline_produces_the_findings_and_events_of_each_scenario(enrolled_fleet,
                                                                         settings):
    settings.AUDIT_METRICS_INTERVAL_S = 8  # metric windows long enough for a TTFT median
    hosts = ["h100-push-02", "h100-chat-03", "h100-spec-04", "h100-chat-05", "h100-batch-06",
             "h100-awq-07", "gb10-spark-01", "gb10-spark-03"]
    timeline = tuple(Event(3.0, e.host, e.action, e.text) for e in TIMELINE)
    sim = enrolled_fleet(hosts, timeline)
    sim.run_round()  # before every event: the dashboard sees 0.25.1, TP=1, the first pid
    time.sleep(max(0.0, sim.event_time(timeline[0]) - time.time()))
    _play(sim, 12, pause=1.0)
    upgrade = _events("h100-push-02", FindingEvent.Kind.VERSION_CHANGED)
    assert [(e.payload["old"], e.payload["new"]) for e in upgrade] == [("0.25.1", "0.27.0")]
    assert "gemma4-version-ceiling" in _active("h100-push-02")
    pending = _events("h100-chat-03", FindingEvent.Kind.PENDING_UPGRADE)
    assert pending and pending[0].payload["installed"] == "0.28.0"
    assert "gemma4-pending-upgrade-into-ceiling" in _active("h100-chat-03")
    assert "eagle-tp-acceptance-collapse" in _active("h100-spec-04")
    assert _events("h100-chat-05", FindingEvent.Kind.RESTARTED_WITHOUT_CHANGE)
    assert "restart-without-config-change" in _active("h100-chat-05")
    assert {"serving-queue-collapse", "gemma4-mtp-unified-memory-concurrency-ceiling"} \
        <= _active("gb10-spark-03")
    assert "gemma4-chat-template-unvetted" in _active("h100-awq-07")  # see demo.specs
    healthy = _active("gb10-spark-01")
    assert not healthy & {"gemma4-31b-nvfp4-eagle3-single-stream-slow",
                          "gemma4-spec-acceptance-below-baseline"}


def test_a_host_that_stops_reporting_goes_silent(enrolled_fleet):
    from alerts.alerts import silent_hosts

    silent = (Event(5.0, "h100-batch-06", "silent", "stops"),)
    sim = enrolled_fleet(["h100-chat-05", "h100-batch-06"], silent, speed=5.0)  # 2 s interval
    sim.run_round()
    time.sleep(max(0.0, sim.event_time(silent[0]) - time.time()))
    deadline = time.time() + 5 * sim.interval_s + 2
    while time.time() < deadline:
        _play(sim, 1, pause=1.0)
    assert [h.hostname for h in silent_hosts()] == ["h100-batch-06"]
    assert Report.objects.filter(host__hostname="h100-batch-06").count() == 1


def test_the_upgrade_sends_one_risky_upgrade_email_and_one_webhook(enrolled_fleet, settings,
                                                                  tmp_path: Path):
    from alerts.alert_tasks import dispatch_events

    settings.ALERTS_ALLOW_PRIVATE_WEBHOOKS = True
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    receiver = WebhookReceiver(tmp_path / "hooks")
    try:
        for kind, dest in (("email", "ops@example.com"), ("webhook", receiver.url + "/hook")):
            channel = AlertChannel(kind=kind, name=kind, destination=dest,
                                   triggers=[Trigger.RISKY_UPGRADE])
            channel.full_clean()
            channel.save()
        sim = enrolled_fleet(["h100-push-02"], (Event(0.2, "h100-push-02", "upgrade", "up"),),
                             speed=1.0)
        _play(sim, 1)
        time.sleep(0.3)
        _play(sim, 2)
        dispatch_events()
        deliveries = Delivery.objects.filter(trigger=Trigger.RISKY_UPGRADE)
        assert sorted(d.channel.kind for d in deliveries) == ["email", "webhook"]
        assert {d.status for d in deliveries} == {Delivery.Status.SENT}
        assert [m.subject for m in mail.outbox if "Risky upgrade" in m.subject] \
            and len(mail.outbox) == 1
        assert "0.25.1 → 0.27.0" in mail.outbox[0].subject
        assert len(list((tmp_path / "hooks").glob("*risky_upgrade.json"))) == 1
    finally:
        receiver.stop()


def test_demo_seed_is_rerunnable_and_sets_up_an_admin_and_two_alert_channels(settings):
    from django.contrib.auth import get_user_model

    from fleet.access import role_of

    settings.ALERTS_ALLOW_PRIVATE_WEBHOOKS = True
    for _ in range(2):
        call_command("demo_seed", no_fixtures=True, alert_email="ops@example.com",
                     alert_webhook="http://127.0.0.1:8025/fleet-alerts")
    user = get_user_model().objects.get(username="demo")
    assert user.check_password("demo") and role_of(user) == "admin"
    channels = {c.kind: c for c in AlertChannel.objects.all()}
    assert sorted(channels) == ["email", "webhook"]
    assert Trigger.RISKY_UPGRADE in channels["email"].triggers
    assert channels["webhook"].secret  # webhook messages are signed
    assert not Host.objects.exists()  # --no-fixtures: the simulator reports, not fixtures
