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
from fleet.models import Host, Report, Server

pytestmark = pytest.mark.django_db(transaction=True)


def _active(hostname: str) -> set[str]:
    return set(Finding.objects.active().filter(host__hostname=hostname)
               .values_list("rule_id", flat=True))


def _events(hostname: str, kind: str) -> list[FindingEvent]:
    return list(FindingEvent.objects.filter(host__hostname=hostname, kind=kind))


def test_one_round_enrolls_every_host_and_posts_a_valid_report_each(eager_dashboard,
                                                                    tmp_path: Path):
    call_command("simulate_fleet", url=eager_dashboard, once=True, sim_dir=str(tmp_path),
                 no_beat=True, wait=60)
    hosts = Host.objects.count()
    assert hosts >= 35
    assert Report.objects.count() == hosts  # one report per host, all accepted
    assert Report.objects.filter(evaluated_at=None).count() == 0
    assert Host.objects.filter(hostname="case038-tesla-v100-16gb").exists()
    # The emulated case-009 server answers /metrics and /v1/models: it is seen serving, so
    # the start-up prediction "TP does not divide the heads" is not raised against it, while
    # the host's live findings are.
    case009 = Finding.objects.active().filter(host__hostname="case009-unknown-gpu")
    assert case009.exists()
    assert not case009.filter(rule_id="up-tp-not-dividing-attention-heads").exists()


def test_the_simulator_refuses_a_dashboard_that_is_not_on_loopback(tmp_path: Path):
    with pytest.raises(CommandError, match="loopback"):
        call_command("simulate_fleet", url="http://10.1.2.3:8000", once=True,
                     sim_dir=str(tmp_path))


#: Longest wait, seconds, for the dashboard to show what the story leads to. Generous: a
#: loaded 2-core CI machine is slow, and a passing test stops waiting as soon as it is shown.
STORY_TIMEOUT_S = 180
#: Seconds (speed 1) after the epoch the tests' events are set at: far beyond the fleet's
#: start-up, however slow, so the dashboard sees the state before them first. The tests then
#: jump the story to them (FleetSim.skip_ahead) rather than sleep until then.
LATER_S = 3600.0


def _play_until(sim, done, timeout_s: float = STORY_TIMEOUT_S, pause: float = 0.5) -> bool:
    """Play rounds (``pause`` seconds apart) until ``done()`` is true; False on timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        sim.run_round()
        if done():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(pause)


def _jump_to(sim, event: Event, ago_s: float = 0.0) -> None:
    """Make ``event`` due ``ago_s`` seconds ago: the next round applies it."""
    sim.skip_ahead(sim.event_time(event) - time.time() + ago_s)


def _versions(hostname: str) -> set[str]:
    """vLLM versions of the host's running servers, as the dashboard recorded them."""
    return set(Server.objects.filter(host__hostname=hostname, is_running=True)
               .values_list("vllm_version", flat=True))


def test_the_timeline_produces_the_findings_and_events_of_each_scenario(enrolled_fleet,
                                                                         settings):
    settings.AUDIT_METRICS_INTERVAL_S = 8  # metric windows long enough for a TTFT median
    hosts = ["h100-push-02", "h100-chat-03", "h100-spec-04", "h100-chat-05", "h100-batch-06",
             "h100-awq-07", "gb10-spark-01", "gb10-spark-03"]
    timeline = tuple(Event(LATER_S, e.host, e.action, e.text) for e in TIMELINE)
    sim = enrolled_fleet(hosts, timeline)
    sim.run_round()  # before every event: the dashboard sees 0.25.1, TP=1, the first pid
    assert _versions("h100-push-02") == {"0.25.1"}
    _jump_to(sim, timeline[0])

    def story_told() -> bool:  # the last findings to appear need two metric windows
        return ("eagle-tp-acceptance-collapse" in _active("h100-spec-04")
                and {"serving-queue-collapse", "gemma4-mtp-unified-memory-concurrency-ceiling"}
                <= _active("gb10-spark-03"))

    # No assert here: the checks below say which part of the story is missing. Every host
    # is evaluated in every round, so the healthy one has had the same metric windows.
    _play_until(sim, story_told)
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

    silent = (Event(LATER_S, "h100-batch-06", "silent", "stops"),)
    sim = enrolled_fleet(["h100-chat-05", "h100-batch-06"], silent, speed=5.0)  # 2 s interval
    sim.run_round()
    assert Report.objects.filter(host__hostname="h100-batch-06").count() == 1
    _jump_to(sim, silent[0])
    # Silent after 5 missed intervals (~10 s), while h100-chat-05 keeps reporting.
    assert _play_until(sim, silent_hosts), "no host went silent"
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
        upgrade = Event(LATER_S, "h100-push-02", "upgrade", "up")
        sim = enrolled_fleet(["h100-push-02"], (upgrade,), speed=1.0)
        sim.run_round()
        assert _versions("h100-push-02") == {"0.25.1"}
        _jump_to(sim, upgrade)
        assert _play_until(sim, lambda: _events("h100-push-02", FindingEvent.Kind.VERSION_CHANGED))
        sim.run_round()  # a second report of the new version: still one alert
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
