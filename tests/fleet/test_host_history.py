"""Server history from consecutive reports: restarts, version/flag/template changes, keep flags."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from fleet.models import ChangeEvent, Report, Server

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def at(minutes: int) -> str:
    return (T0 + timedelta(minutes=minutes)).isoformat().replace("+00:00", "Z")


def kinds() -> list[str]:
    return list(ChangeEvent.objects.order_by("at", "id").values_list("kind", flat=True))


def test_a_new_pid_and_start_time_is_recorded_as_a_restart(post_report, make_report, enrolled):
    _, token = enrolled()
    post_report(make_report(collected_at=at(0)), token=token)
    post_report(make_report(collected_at=at(1), server={
        "pid": 999, "started_at": at(1)}), token=token)
    server = Server.objects.get()
    assert server.restart_count == 1
    restart = ChangeEvent.objects.get(kind="restart")
    assert "1234" in restart.old_value and "999" in restart.new_value
    # a restart with the same version, flags and template is only a restart
    assert kinds() == ["server_started", "restart"]


def test_the_same_process_reporting_again_is_not_a_restart(post_report, make_report, enrolled):
    _, token = enrolled()
    post_report(make_report(collected_at=at(0)), token=token)
    post_report(make_report(collected_at=at(1)), token=token)
    assert Server.objects.get().restart_count == 0
    assert kinds() == ["server_started"]


def test_a_version_change_is_recorded_with_old_and_new_values(post_report, make_report,
                                                              enrolled):
    _, token = enrolled()
    post_report(make_report(collected_at=at(0)), token=token)
    post_report(make_report(collected_at=at(1), server={
        "pid": 2000, "started_at": at(1), "vllm_version": "0.27.0",
        "installed_vllm_version": "0.27.0"}), token=token)
    event = ChangeEvent.objects.get(kind="version_changed")
    assert (event.old_value, event.new_value) == ("0.25.1", "0.27.0")
    server = Server.objects.get()
    assert (server.vllm_version, server.previous_vllm_version) == ("0.27.0", "0.25.1")
    newest = Report.objects.order_by("-collected_at").first()
    assert newest.keep and "version changed" in newest.keep_reason


def test_a_pending_upgrade_shows_as_installed_differing_from_running(
        post_report, make_report, enrolled):
    _, token = enrolled()
    post_report(make_report(collected_at=at(0)), token=token)
    post_report(make_report(collected_at=at(1), server={"installed_vllm_version": "0.27.0"}),
                token=token)
    server = Server.objects.get()
    assert server.pending_upgrade
    event = ChangeEvent.objects.get(kind="installed_version_changed")
    assert (event.old_value, event.new_value) == ("0.25.1", "0.27.0")


def test_changed_flags_and_template_are_recorded_and_kept(post_report, make_report, enrolled):
    _, token = enrolled()
    post_report(make_report(collected_at=at(0)), token=token)
    argv = ["vllm", "serve", "google/gemma-4-31B-it", "--max-model-len", "32768"]
    post_report(make_report(collected_at=at(1), server={
        "pid": 3000, "started_at": at(1), "argv": argv,
        "chat_template": {"source": "x.jinja", "sha256": "b" * 64, "size_bytes": 10}}),
        token=token)
    assert set(kinds()) == {"server_started", "restart", "config_changed", "template_changed"}
    config = ChangeEvent.objects.get(kind="config_changed")
    assert "65536" in config.old_value and "32768" in config.new_value
    newest = Report.objects.order_by("-collected_at").first()
    assert "flags changed" in newest.keep_reason and "template changed" in newest.keep_reason


def test_an_unchanged_report_is_not_kept_past_retention(post_report, make_report, enrolled):
    _, token = enrolled()
    post_report(make_report(collected_at=at(0)), token=token)
    post_report(make_report(collected_at=at(1)), token=token)
    first, second = Report.objects.order_by("collected_at")
    assert first.keep  # the baseline
    assert not second.keep


def test_a_gpu_swap_is_recorded_and_kept(post_report, make_report, enrolled):
    _, token = enrolled()
    post_report(make_report(collected_at=at(0)), token=token)
    report = make_report(collected_at=at(1))
    report["gpus"][0].update(uuid="GPU-bbbb", name="NVIDIA H200")
    post_report(report, token=token)
    event = ChangeEvent.objects.get(kind="gpus_changed")
    assert (event.old_value, event.new_value) == ("NVIDIA H100 80GB HBM3", "NVIDIA H200")
    assert Report.objects.order_by("-collected_at").first().keep


def test_a_server_missing_from_the_next_report_is_marked_stopped(post_report, make_report,
                                                                 enrolled):
    _, token = enrolled()
    post_report(make_report(collected_at=at(0)), token=token)
    post_report(make_report(collected_at=at(1), servers=[]), token=token)
    assert not Server.objects.get().is_running
    assert kinds()[-1] == "server_stopped"


def test_a_late_replayed_report_does_not_roll_the_state_back(post_report, make_report,
                                                             enrolled):
    _, token = enrolled()
    post_report(make_report(collected_at=at(5), server={"vllm_version": "0.27.0"}), token=token)
    post_report(make_report(collected_at=at(0), server={"vllm_version": "0.25.1"}), token=token)
    assert Report.objects.count() == 2
    assert Server.objects.get().vllm_version == "0.27.0"
    assert not ChangeEvent.objects.filter(kind="version_changed").exists()


def test_servers_on_two_ports_are_two_servers(post_report, make_report, enrolled):
    _, token = enrolled()
    report = make_report()
    second = dict(report["servers"][0], pid=4321, base_url=None,
                  argv=["vllm", "serve", "m", "--port=8001"])
    report["servers"].append(second)
    post_report(report, token=token)
    assert sorted(Server.objects.values_list("identity", flat=True)) == ["port:8000", "port:8001"]


def test_two_processes_on_one_port_do_not_look_like_restarts(post_report, make_report,
                                                             enrolled):
    _, token = enrolled()
    for minute in range(3):
        report = make_report(collected_at=at(minute))
        twin = dict(report["servers"][0], pid=1235)
        report["servers"] = [twin, report["servers"][0]] if minute % 2 else [
            report["servers"][0], twin]
        post_report(report, token=token)
    server = Server.objects.get()
    assert (server.pid, server.restart_count) == (1234, 0)
