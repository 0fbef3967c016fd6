"""Which events reach which channel: grouping, throttling, silences, first reports."""

from __future__ import annotations

from datetime import timedelta

import pytest
from alertkit import (
    ChannelFactory,
    FindingEventFactory,
    FindingFactory,
    HostFactory,
    ServerFactory,
    upgrade_event,
)
from django.utils import timezone

from alerts.alert_tasks import check_silent_hosts
from alerts.models import Delivery
from audit.models import Finding, FindingEvent, Rule

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("allow_local")]

ALL_TRIGGERS = ["risky_upgrade", "new_finding", "resolved", "host_silent", "metric_alarm"]


def test_a_fleet_upgrade_of_50_hosts_is_one_message_per_channel(receiver, smtp, run_dispatch):
    ChannelFactory(kind="webhook", destination=receiver.url + "/webhook")
    ChannelFactory(kind="slack", destination=receiver.url + "/slack")
    ChannelFactory(kind="email", destination="oncall@example.com")
    for n in range(50):
        server = ServerFactory(host__hostname=f"fleet-{n:02d}")
        upgrade_event(server, [FindingFactory(server=server, rule_id="g4-regression")])

    assert run_dispatch() == 3

    assert sorted(r.path for r in receiver.requests) == ["/hook/slack", "/hook/webhook"]
    webhook = next(r for r in receiver.requests if r.path.endswith("webhook")).json()
    assert len(webhook["items"]) == 50
    assert {i["host"] for i in webhook["items"]} == {f"fleet-{n:02d}" for n in range(50)}
    assert webhook["title"] == "Risky upgrade: 50 on 50 host(s)"
    slack = next(r for r in receiver.requests if r.path.endswith("slack")).json()
    assert "…and 35 more" in str(slack["blocks"])
    [mail] = smtp.messages
    text = mail.get_body(("plain",)).get_content()
    assert all(f"fleet-{n:02d}" in text for n in range(50))
    assert FindingEvent.objects.filter(dispatched_at=None).count() == 0


def test_findings_an_upgrade_opened_come_in_the_upgrade_message_not_a_second_one(
        receiver, run_dispatch):
    ChannelFactory(destination=receiver.url + "/both")
    ChannelFactory(destination=receiver.url + "/findings-only", triggers=["new_finding"])
    server = ServerFactory()
    finding = FindingFactory(server=server, rule_id="g4-regression")
    event = upgrade_event(server, [finding])
    FindingEventFactory(finding=finding, at=event.at)

    run_dispatch()

    triggers = sorted((r.path, r.json()["trigger"]) for r in receiver.requests)
    assert triggers == [("/hook/both", "risky_upgrade"), ("/hook/findings-only", "new_finding")]


def test_a_silenced_finding_sends_no_message(receiver, run_dispatch):
    ChannelFactory(destination=receiver.url, triggers=ALL_TRIGGERS)
    finding = FindingFactory(status=Finding.Status.SILENCED,
                             silenced_until=timezone.now() + timedelta(hours=4))
    FindingEventFactory(finding=finding)

    assert run_dispatch() == 0
    assert receiver.requests == []


def test_an_acknowledged_finding_sends_no_message(receiver, run_dispatch):
    ChannelFactory(destination=receiver.url)
    finding = FindingFactory(status=Finding.Status.ACKNOWLEDGED)
    FindingEventFactory(finding=finding)

    run_dispatch()

    assert receiver.requests == []


def test_a_lapsed_silence_alerts_again(receiver, run_dispatch):
    ChannelFactory(destination=receiver.url)
    finding = FindingFactory(status=Finding.Status.SILENCED,
                             silenced_until=timezone.now() - timedelta(minutes=1))
    FindingEventFactory(finding=finding)

    run_dispatch()

    assert len(receiver.requests) == 1


def test_an_upgrade_lists_only_the_findings_nobody_silenced(receiver, run_dispatch):
    ChannelFactory(destination=receiver.url)
    server = ServerFactory()
    loud = FindingFactory(server=server, rule_id="loud")
    quiet = FindingFactory(server=server, rule_id="quiet", status=Finding.Status.SILENCED,
                           silenced_until=timezone.now() + timedelta(days=1))
    upgrade_event(server, [loud, quiet])
    other = ServerFactory()
    upgrade_event(other, [FindingFactory(server=other, rule_id="quiet", status="silenced",
                                         silenced_until=timezone.now() + timedelta(days=1))])

    run_dispatch()

    [request] = receiver.requests
    [item] = request.json()["items"]
    assert [f["rule_id"] for f in item["findings"]] == ["loud"]


def test_first_report_events_do_not_alert_unless_the_channel_asks(receiver, run_dispatch):
    ChannelFactory(destination=receiver.url + "/plain")
    ChannelFactory(destination=receiver.url + "/initial", include_initial=True)
    FindingEventFactory(finding=FindingFactory(), initial=True)

    run_dispatch()

    assert [r.path for r in receiver.requests] == ["/hook/initial"]


def test_a_repeat_of_the_same_host_and_rule_is_throttled(receiver, run_dispatch):
    ChannelFactory(destination=receiver.url)
    server = ServerFactory()
    FindingEventFactory(finding=FindingFactory(server=server, rule_id="flappy"))
    run_dispatch()
    Finding.objects.filter(rule_id="flappy").update(status=Finding.Status.RESOLVED)
    FindingEventFactory(finding=FindingFactory(server=server, rule_id="flappy"))
    FindingEventFactory(finding=FindingFactory(server=server, rule_id="another"))

    run_dispatch()

    assert len(receiver.requests) == 2
    second = receiver.requests[1].json()
    assert [i["findings"][0]["rule_id"] for i in second["items"]] == ["another"]


def test_min_severity_and_host_labels_decide_which_channel_hears(receiver, run_dispatch):
    ChannelFactory(destination=receiver.url + "/high", min_severity="high")
    ChannelFactory(destination=receiver.url + "/medium", min_severity="medium")
    ChannelFactory(destination=receiver.url + "/staging", min_severity="info",
                   host_labels={"env": "staging"})
    server = ServerFactory(host__labels={"env": "prod"})
    FindingEventFactory(finding=FindingFactory(server=server, severity="medium"))

    run_dispatch()

    assert [r.path for r in receiver.requests] == ["/hook/medium"]


def test_a_pending_upgrade_alerts_before_the_restart_with_the_fixing_version(
        receiver, run_dispatch):
    ChannelFactory(destination=receiver.url)
    Rule.objects.create(rule_id="g4-tool-call-break", title="Forced tool_choice breaks",
                        kind="known_issue", severity="high", fixed_in="0.28.1")
    server = ServerFactory(vllm_version="0.25.1", installed_vllm_version="0.27.0")
    FindingEventFactory(kind=FindingEvent.Kind.PENDING_UPGRADE, server=server, payload={
        "running": "0.25.1", "installed": "0.27.0",
        "would_open": [{"rule_id": "g4-tool-call-break", "severity": "high",
                        "title": "Forced tool_choice breaks"}]})

    run_dispatch()

    body = receiver.requests[0].json()
    assert body["trigger"] == "risky_upgrade"
    [item] = body["items"]
    assert item["headline"] == "vLLM 0.25.1 → 0.27.0 installed, not yet running"
    assert item["findings"][0]["fixed_in"] == "0.28.1"


def test_an_upgrade_that_opens_nothing_severe_is_not_an_alert(receiver, run_dispatch):
    ChannelFactory(destination=receiver.url, min_severity="info")
    upgrade_event(ServerFactory(), [])

    assert run_dispatch() == 0
    assert receiver.requests == []


def test_an_upgrade_crossing_a_knowledge_base_ceiling_is_risky(receiver, run_dispatch):
    ChannelFactory(destination=receiver.url)
    server = ServerFactory()
    event = upgrade_event(server, [])
    FindingFactory(server=server, kind="ceiling", severity="info", rule_id="kb-version-not-vetted",
                   first_seen=event.at)
    Rule.objects.create(rule_id="kb-version-not-vetted", title="Newer than vetted",
                        kind="ceiling", severity="info", fixed_in="0.99.0")

    run_dispatch()

    [request] = receiver.requests
    body = request.json()
    assert body["severity"] == "high"
    [ref] = body["items"][0]["findings"]
    assert ref["rule_id"] == "kb-version-not-vetted" and ref["fixed_in"] == "0.99.0"


def test_only_escalations_alert_and_resolutions_reach_subscribed_channels(
        receiver, run_dispatch):
    ChannelFactory(destination=receiver.url + "/default", min_severity="info")
    ChannelFactory(destination=receiver.url + "/resolved", min_severity="info",
                   triggers=["resolved"])
    finding = FindingFactory(severity="high")
    FindingEventFactory(finding=finding, kind=FindingEvent.Kind.SEVERITY_CHANGED,
                        payload={"old": "critical", "new": "high"})
    FindingEventFactory(finding=FindingFactory(), kind=FindingEvent.Kind.RESOLVED)

    run_dispatch()

    assert [r.path for r in receiver.requests] == ["/hook/resolved"]


def test_metric_findings_are_live_metric_alarms(receiver, run_dispatch):
    ChannelFactory(destination=receiver.url + "/alarms", triggers=["metric_alarm"])
    ChannelFactory(destination=receiver.url + "/findings", triggers=["new_finding"])
    FindingEventFactory(finding=FindingFactory(kind="metric", title="Draft acceptance collapsed"))

    run_dispatch()

    [request] = receiver.requests
    assert request.path == "/hook/alarms" and request.json()["trigger"] == "metric_alarm"


def test_a_rule_on_the_metrics_cadence_is_a_live_metric_alarm_whatever_its_kind(
        receiver, run_dispatch):
    ChannelFactory(destination=receiver.url, triggers=["metric_alarm"])
    Rule.objects.create(rule_id="up-queue-collapse", title="Queue collapse near the memory wall",
                        kind="ceiling", severity="high", cadence="metrics")
    FindingEventFactory(finding=FindingFactory(kind="ceiling", rule_id="up-queue-collapse"))

    run_dispatch()

    assert receiver.requests[0].json()["trigger"] == "metric_alarm"


def test_events_are_dispatched_once(receiver, run_dispatch):
    ChannelFactory(destination=receiver.url)
    FindingEventFactory(finding=FindingFactory())

    assert run_dispatch() == 1
    assert run_dispatch() == 0
    assert len(receiver.requests) == 1 and Delivery.objects.count() == 1


def test_a_silent_host_alerts_once_per_silence(receiver, eager, settings,
                                               django_capture_on_commit_callbacks):
    settings.ALERT_HOST_SILENT_INTERVALS = 5
    ChannelFactory(destination=receiver.url)
    quiet = HostFactory(hostname="went-quiet", last_seen=timezone.now() - timedelta(minutes=3))
    HostFactory(hostname="still-reporting", last_seen=timezone.now() - timedelta(seconds=40))
    HostFactory(hostname="slow-agent", agent_interval_s=300,
                last_seen=timezone.now() - timedelta(minutes=10))

    with django_capture_on_commit_callbacks(execute=True):
        check_silent_hosts()
        check_silent_hosts()

    [request] = receiver.requests
    assert [i["host"] for i in request.json()["items"]] == ["went-quiet"]
    quiet.last_seen = timezone.now() - timedelta(minutes=4)  # it came back, then went quiet
    quiet.save()
    with django_capture_on_commit_callbacks(execute=True):
        check_silent_hosts()
    assert len(receiver.requests) == 2
