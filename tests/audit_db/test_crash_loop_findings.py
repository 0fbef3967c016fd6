"""Failed starts through ingest and evaluation: a server that stops coming back
after an upgrade shows as down with the error line that killed it, the matching rule fires as
"server down", a crash loop is a finding of its own (once per loop), and both resolve when the
server runs again."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from audit import evaluation
from audit.crashloop import CRASH_LOOP_RULE_ID, FAILED_START_RULE_ID, restarts_in_window
from audit.models import Finding, FindingEvent
from fleet.models import Server
from tests.conftest import iso

pytestmark = pytest.mark.django_db

DATA = json.loads((Path(__file__).parents[1] / "data" / "failed_start_lines.json").read_text())
KV = next(r for r in DATA["lines"] if r["rule_id"] == "up-max-model-len-default-exceeds-kv")
START = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)
ARGV = ["vllm", "serve", "google/gemma-4-31B-it", "--max-model-len", "65536"]


def failed(restarts: int, *, line: str = KV["line"], minutes: int = 0,
           source: str = "systemd") -> dict:
    return {"source": source, "unit_or_container": "vllm-gemma.service", "argv": ARGV,
            "restart_count": restarts if source != "process" else None, "exit_code": 1,
            "last_exit_at": iso(START + timedelta(minutes=minutes, seconds=-5)),
            "state": "activating/auto-restart",
            "lines": ["Traceback (most recent call last):", line]}


@pytest.fixture
def send(enrolled, post_report, make_report):
    """POST and evaluate a report at ``minutes``; ``running`` False sends no server."""
    _, token = enrolled()

    def post(minutes: int, running: bool = True, failed_starts: list | None = None,
             **server) -> str:
        body = make_report(server=server, collected_at=iso(START + timedelta(minutes=minutes)),
                           failed_starts=failed_starts or [])
        if not running:
            body["servers"] = []
        response = post_report(body, token)
        assert response.status_code == 202, response.content
        evaluation.evaluate_report(body["report_id"])
        return body["report_id"]
    return post


def _upgrade_that_fails(send) -> None:
    send(0, vllm_version="0.25.1", installed_vllm_version="0.25.1")
    send(1, vllm_version="0.25.1", installed_vllm_version="0.30.0")  # pending upgrade
    send(2, running=False, failed_starts=[failed(1, minutes=2)])
    send(3, running=False, failed_starts=[failed(4, minutes=3)])


def test_a_failed_upgrade_shows_the_server_down_with_the_line_and_the_fix(send):
    _upgrade_that_fails(send)

    server = Server.objects.get(identity="port:8000")
    assert not server.is_running
    assert server.failed_start["entry"]["lines"][-1] == KV["line"]
    down = Finding.objects.active().get(rule_id=KV["rule_id"])
    assert down.title.startswith("Server down: ")
    assert down.severity == "critical"  # crash-looping
    assert down.evidence["matched_line"] == KV["line"]
    loop = Finding.objects.active().get(rule_id=CRASH_LOOP_RULE_ID)
    assert loop.title.startswith("Risky upgrade did not come back")
    assert "0.25.1" in loop.message and "0.30.0" in loop.message
    # one remedy for the incident, in both findings (and so in their alerts): the release
    # that ran, pinned exactly
    assert "pip install vllm==0.25.1" in down.remediation
    assert loop.remediation == down.remediation
    assert KV["line"][:80] in loop.message
    assert loop.evidence["restarts_in_window"] >= 3


def test_one_crash_loop_is_one_opened_event(send):
    _upgrade_that_fails(send)
    send(4, running=False, failed_starts=[failed(6, minutes=4)])
    send(5, running=False, failed_starts=[failed(9, minutes=5)])

    loop = Finding.objects.get(rule_id=CRASH_LOOP_RULE_ID)
    assert FindingEvent.objects.filter(finding=loop, kind="opened").count() == 1


def test_a_crash_loop_with_no_matching_rule_is_still_a_finding(send):
    send(0, vllm_version="0.25.1", installed_vllm_version="0.25.1")
    odd = "RuntimeError: something nobody has seen before"
    send(1, running=False, failed_starts=[failed(5, line=odd, minutes=1)])

    loop = Finding.objects.active().get(rule_id=CRASH_LOOP_RULE_ID)
    assert odd in loop.message and loop.title.startswith("Crash loop")
    assert loop.evidence["matched_rules"] == []
    # no rule, no check of vLLM and no setting explain it: said plainly, with no setting
    down = Finding.objects.active().get(rule_id=FAILED_START_RULE_ID)
    assert down.evidence["explanation"]["kind"] == "exception"
    assert down.evidence["explanation"]["setting"] is None and odd in down.title
    assert Finding.objects.active().filter(evidence__failed_start=True).count() == 2


def test_a_single_failed_start_is_not_a_loop(send):
    send(0, vllm_version="0.25.1", installed_vllm_version="0.25.1")
    send(1, running=False, failed_starts=[failed(1, minutes=1)])

    assert Finding.objects.active().filter(rule_id=KV["rule_id"]).get().severity == "high"
    assert not Finding.objects.active().filter(rule_id=CRASH_LOOP_RULE_ID).exists()


def test_running_again_resolves_the_failed_start_findings(send):
    _upgrade_that_fails(send)
    send(4, pid=999, vllm_version="0.30.0", installed_vllm_version="0.30.0",
         started_at=iso(START + timedelta(minutes=4)))

    assert not Finding.objects.active().filter(evidence__failed_start=True).exists()
    resolved = FindingEvent.objects.filter(kind="resolved", rule_id=CRASH_LOOP_RULE_ID)
    assert resolved.count() == 1
    assert Server.objects.get(identity="port:8000").failed_start is None


def test_a_unit_stopped_by_the_operator_resolves(send):
    _upgrade_that_fails(send)
    send(4, running=False)
    assert not Finding.objects.active().filter(evidence__failed_start=True).exists()


def test_a_failed_start_for_a_new_slot_creates_a_down_server(send):
    send(0, vllm_version="0.25.1", installed_vllm_version="0.25.1")
    entry = {**failed(2, minutes=1), "argv": ARGV + ["--port", "8011"]}
    send(1, failed_starts=[entry])

    new = Server.objects.get(identity="port:8011")
    assert not new.is_running and new.failed_start["entry"]["restart_count"] == 2
    assert Server.objects.get(identity="port:8000").is_running


def test_restarts_in_window_counts_only_the_window():
    now = START + timedelta(minutes=30)
    state = {"observations": [[iso(START), 10], [iso(START + timedelta(minutes=25)), 11],
                              [iso(now), 14]],
             "entry": {"last_exit_at": iso(now)}}
    assert restarts_in_window(state, now, 600) == 4  # 14 - the 10 seen before the window
    old = {"observations": [[iso(now), 50]],
           "entry": {"last_exit_at": iso(now - timedelta(hours=2))}}
    assert restarts_in_window(old, now, 600) == 0
    fresh = {"observations": [[iso(now), 5]], "entry": {"last_exit_at": iso(now)}}
    assert restarts_in_window(fresh, now, 600) == 5


def test_the_host_page_shows_the_failed_start_with_cause_fix_and_command(
        send, client, django_user_model):
    from fleet.access import set_role

    _upgrade_that_fails(send)
    hostile = "RuntimeError: <script>alert(1)</script>"
    send(4, running=False, failed_starts=[{**failed(6, minutes=4),
                                           "lines": [hostile, KV["line"]]}])
    user = django_user_model.objects.create_user("viewer-1")
    set_role(user, "viewer")
    client.force_login(user)
    server = Server.objects.get(identity="port:8000")
    page = client.get(f"/hosts/{server.host.code}/").content.decode()

    block = page.split(f'id="failed-start-{server.pk}"', 1)[1].split("</section>", 1)[0]
    assert "down: failed start" in page
    assert "vllm-gemma.service" in block and "crash loop" in block
    assert "6 restarts in all" in block
    assert "stored in KV cache (3664)" in block  # the line that killed it
    assert "Server down: " in block and "Remedy:" in block
    assert "&lt;script&gt;" in block and "<script>alert" not in page
    # the same remedy in the failed-start block and the top box, and no command there that
    # would start the failing 0.30.0 again
    assert "pip install vllm==0.25.1" in block
    top = page[page.index('id="what-to-do"'):page.index("<h2>Charts")]
    assert "pip install vllm==0.25.1" in top and "Down: failed start" in top
    assert "vllm serve" not in top
    assert 'class="st st-reporting' not in page  # the badge is not green
    overview = client.get("/").content.decode()
    row = overview.split(server.host.hostname, 1)[1].split("</tr>", 1)[0]
    assert "st-reporting" not in row
    plan = client.get(f"/plan/?host={server.host.code}").content.decode()
    assert "failed to start" in plan and "pip install vllm==0.25.1" in plan
    assert "will become 0.30.0 on next restart" not in plan


def test_oversized_or_malformed_failed_starts_are_refused_with_the_field_path(
        enrolled, post_report, make_report):
    _, token = enrolled()
    too_many_lines = {**failed(1), "lines": ["ERROR x"] * 101}
    bad_source = {**failed(1), "source": "cron"}
    for entry, path in ((too_many_lines, "failed_starts[0].lines"),
                        (bad_source, "failed_starts[0].source")):
        response = post_report(make_report(failed_starts=[entry]), token)
        assert response.status_code in (400, 422), response.content
        assert path in response.content.decode()


def test_a_report_cannot_grow_the_slots_of_a_host_without_bound(send):
    from fleet.recording import MAX_SLOTS_PER_HOST

    send(0)
    host = Server.objects.get().host
    Server.objects.bulk_create([Server(host=host, identity=f"port:{9000 + i}", pid=1)
                                for i in range(MAX_SLOTS_PER_HOST - 1)])
    send(1, failed_starts=[{**failed(2, minutes=1), "argv": ARGV + ["--port", "7777"]}])
    assert not Server.objects.filter(identity="port:7777").exists()


def test_the_host_page_says_which_failed_start_source_was_unreadable(
        enrolled, post_report, make_report, client, django_user_model):
    from fleet.access import set_role

    host, token = enrolled()
    body = make_report(failed_start_errors=["docker: cannot connect to /var/run/docker.sock"])
    assert post_report(body, token).status_code == 202
    user = django_user_model.objects.create_user("viewer-2")
    set_role(user, "viewer")
    client.force_login(user)
    page = client.get(f"/hosts/{host.code}/").content.decode()
    assert "not readable: docker: cannot connect to /var/run/docker.sock" in page


def _process_findings() -> set[str]:
    """Active rule ids that describe the running process (pending upgrade, metrics)."""
    from audit.rulebook import current_knowledge_base

    rules = {r.id: r for r in current_knowledge_base().rules}
    return {f.rule_id for f in Finding.objects.active()
            if not (f.evidence or {}).get("failed_start") and f.rule_id in rules
            and (rules[f.rule_id].cadence == "metrics"
                 or "pending_upgrade" in rules[f.rule_id].condition_text)}


def test_a_failed_start_after_the_last_run_resolves_the_dead_process_findings(send):
    send(0, vllm_version="0.25.1", installed_vllm_version="0.25.1", argv=ARGV)
    # Gemma 4 with 0.27.x installed: the head_dim rule says the restart is at risk
    send(1, vllm_version="0.25.1", installed_vllm_version="0.27.1", argv=ARGV)
    assert _process_findings()  # "restart pending" while the old process runs
    send(2, running=False, failed_starts=[failed(1, minutes=2)])
    assert not _process_findings()
    assert Finding.objects.active().filter(rule_id=KV["rule_id"]).exists()


def test_a_running_server_keeps_its_pending_upgrade_findings(send):
    # Near miss: no failed start, the process still runs with the upgrade pending.
    send(0, vllm_version="0.25.1", installed_vllm_version="0.25.1", argv=ARGV)
    send(1, vllm_version="0.25.1", installed_vllm_version="0.27.1", argv=ARGV)
    send(2, vllm_version="0.25.1", installed_vllm_version="0.27.1", argv=ARGV)
    assert _process_findings()


HEAD_DIM = next(r for r in DATA["lines"]
                if r["rule_id"] == "upm-gemma4-transformers-515-head-dim")


def test_the_command_for_a_crash_fixed_later_targets_the_fixing_release(send):
    from front.views_failed import past_fix

    send(0, vllm_version="0.25.1", installed_vllm_version="0.27.1")
    send(1, running=False, failed_starts=[failed(4, line=HEAD_DIM["line"], minutes=1)])
    server = Server.objects.get(identity="port:8000")
    causes = [f.rule_id for f in server.findings.active()
              if (f.evidence or {}).get("failed_start")]
    assert past_fix(server, causes) == "0.28.0"  # not the installed 0.27.1 that crashes
    # Near miss: a cause with no fixing release (max-model-len) keeps the installed release.
    send(2, running=False, failed_starts=[failed(5, minutes=2)])
    server.refresh_from_db()
    causes = [f.rule_id for f in server.findings.active()
              if (f.evidence or {}).get("failed_start")]
    assert KV["rule_id"] in causes
    assert past_fix(server, causes) is None


def test_the_failed_command_is_shell_quoted_so_pasting_it_runs_only_the_argv(
        send, client, django_user_model):
    """Agent data is hostile; the crashing command is shown with each token through
    shlex.quote (page block and the finding's evidence), so ``$(…)``, backticks and ``;``
    paste as literal text."""
    import shlex

    from fleet.access import set_role

    argv = ["vllm", "serve", "m", "--served-model-name", "$(touch /tmp/pwned)", "a b; id",
            "`reboot`"]
    send(0, vllm_version="0.25.1", installed_vllm_version="0.25.1")
    send(1, running=False, failed_starts=[{**failed(2, minutes=1), "argv": argv}])
    user = django_user_model.objects.create_user("viewer-3")
    set_role(user, "viewer")
    client.force_login(user)
    server = Server.objects.get(identity="port:8000")
    page = client.get(f"/hosts/{server.host.code}/").content.decode()
    block = page.split(f'id="failed-start-{server.pk}"', 1)[1].split("</section>", 1)[0]
    shown = block.split("Command that failed", 1)[1].split("</pre>", 1)[0]
    quoted = "vllm serve m --served-model-name &#x27;$(touch /tmp/pwned)&#x27; " \
             "&#x27;a b; id&#x27; &#x27;`reboot`&#x27;"
    assert quoted in shown
    assert shlex.split(shlex.join(argv)) == argv  # what pasting gives back: the argv only
    finding = Finding.objects.filter(server=server, evidence__failed_start=True).first()
    assert finding is not None and finding.evidence["argv"] == shlex.join(argv)
