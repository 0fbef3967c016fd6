"""End to end: an operator enables live probes, the agent learns it from the report
answer, runs them in its next cycle, the report carries the result, the advisory's severity
changes and the alert says "confirmed"; a server whose probes are off receives nothing."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from demo.emulator import Behaviour, Emulator
from demo.traffic import TrafficState, Workload
from fleet import probes as fleet_probes
from fleet.models import ProbePolicy, Server
from fleet_agent.config import AgentConfig, ServerOverride
from fleet_agent.probes import slot_of
from fleet_agent.runner import Agent

pytestmark = pytest.mark.django_db(transaction=True)
IDLE = Workload(gen_tps=0.0, prompt_len=100, gen_len=50, ttft_s=0.1, tpot_s=0.02, running=0)
ARGV = ["vllm", "serve", "google/gemma-4-31B-it", "--tool-call-parser", "gemma4",
        "--enable-auto-tool-choice"]
RULE = "gemma4-forced-tool-choice-unenforced"


def _emulator(faults: set[str]) -> Emulator:
    state = TrafficState(model_name="google/gemma-4-31B-it", version="0.25.1", workload=IDLE,
                         started_at=time.time())
    return Emulator(Behaviour(version="0.25.1", model_id="google/gemma-4-31B-it",
                              root="google/gemma-4-31B-it", max_model_len=65536, state=state,
                              faults=faults))


@pytest.fixture
def node(tmp_path: Path):
    faulty, off = _emulator({"tool_choice_prose"}), _emulator({"tool_choice_prose"})
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/machine-id").write_text("machine-probe\n")
    yield tmp_path, faulty, off
    faulty.stop()
    off.stop()


def _agent(root: Path, url: str, token: str, emulators: list[Emulator]) -> Agent:
    config = AgentConfig(server_url=url, token=token, spool_dir=str(root / "spool"),
                         servers=[ServerOverride(base_url=e.base_url, argv=ARGV)
                                  for e in emulators])
    return Agent(config=config, root=root, gpu_source="none")


def _cycle(agent: Agent) -> None:
    """One agent cycle against the live dashboard, then the worker's first step for what it
    stored (ingest only inserts the raw report; no Celery worker runs in this test)."""
    from fleet.models import Report
    from fleet.recording import derive_report

    deliverer = agent.deliverer(threading.Event())
    try:
        assert agent.cycle(deliverer)["delivered"] == 1
    finally:
        deliverer.close()
    for report_id in Report.objects.filter(derived_at=None).values_list("report_id", flat=True):
        derive_report(str(report_id))


def _finding(server_identity: str):
    from audit.models import Finding
    from audit.tasks import evaluate_report

    server = Server.objects.get(identity=server_identity)
    evaluate_report(str(server.last_report.report_id))
    return Finding.objects.active().get(server=server, rule_id=RULE)


def test_operator_enables_agent_probes_finding_confirmed(node, live_server, enrolled, client,
                                                         role_user):
    root, faulty, off = node
    host, token = enrolled(machine_id="machine-probe", hostname="probe-node")
    agent = _agent(root, live_server.url, token, [faulty, off])
    identity = slot_of(faulty.base_url, ARGV)

    _cycle(agent)  # probes off everywhere: nothing is asked, nothing is sent
    assert faulty.behaviour.posts == 0 and off.behaviour.posts == 0
    assert _finding(identity).severity == "low"

    client.force_login(role_user("viewer"))
    denied = client.post(f"/hosts/{host.code}/probes/", {"server": identity,
                                                         "action": "enable"})
    assert denied.status_code == 403
    client.force_login(role_user("operator"))
    client.post(f"/hosts/{host.code}/probes/", {"server": identity, "action": "enable",
                                                "interval_h": "1"})
    assert ProbePolicy.objects.get(host=host).server_identity == identity

    _cycle(agent)  # the answer names the server; the agent runs its probes next cycle
    assert faulty.behaviour.posts == 0
    _cycle(agent)
    assert faulty.behaviour.posts > 0 and off.behaviour.posts == 0
    raw = Server.objects.get(identity=identity).last_report.raw
    (entry,) = [s for s in raw["servers"] if s["base_url"] == faulty.base_url]
    outcomes = {p["name"]: p["outcome"] for p in entry["probes"]}
    assert outcomes["forced_tool_choice"] == "confirmed"

    finding = _finding(identity)
    assert finding.severity == "medium"
    assert "Confirmed on this server by a live probe" in finding.message
    off_finding = _finding(slot_of(off.base_url, ARGV))
    assert off_finding.severity == "low" and "live probe" not in off_finding.message

    page = client.get(f"/hosts/{host.code}/").content.decode()
    assert "Live probes" in page and "forced_tool_choice" in page


def test_severity_change_alert_says_confirmed(node, live_server, enrolled):
    from alerts.alerts import classify
    from audit.models import FindingEvent

    root, faulty, _ = node
    host, token = enrolled(machine_id="machine-probe", hostname="probe-node")
    agent = _agent(root, live_server.url, token, [faulty])
    identity = slot_of(faulty.base_url, ARGV)
    _cycle(agent)
    _finding(identity)
    fleet_probes.enable(host, "", ["forced_tool_choice"], 3600, "op")
    _cycle(agent)
    _cycle(agent)
    finding = _finding(identity)
    event = FindingEvent.objects.filter(finding=finding,
                                        kind=FindingEvent.Kind.SEVERITY_CHANGED).latest("at")
    routed = classify(event)
    assert routed is not None and "confirmed on this server" in routed.item.headline
    assert "Confirmed on this server" in routed.item.detail


def test_probe_requests_at_most_once_an_hour_per_server(db, host_factory):
    host = host_factory(machine_id="m-rate", hostname="rate")
    assert fleet_probes.due_requests(host, ["port:8000"]) == []  # off by default
    fleet_probes.enable(host, "", None, 3600, "op")
    now = timezone.now()
    first = fleet_probes.due_requests(host, ["port:8000", "port:8001"], now)
    assert [r["server"] for r in first] == ["port:8000", "port:8001"]
    assert fleet_probes.due_requests(host, ["port:8000"], now + timedelta(minutes=59)) == []
    assert fleet_probes.due_requests(host, ["port:8000"], now + timedelta(minutes=61))
    with pytest.raises(fleet_probes.PolicyError):
        fleet_probes.enable(host, "port:8000", None, 600, "op")
    with pytest.raises(fleet_probes.PolicyError):
        fleet_probes.enable(host, "port:8000", ["rm -rf /"], 3600, "op")
    fleet_probes.disable(host, "")
    assert fleet_probes.due_requests(host, ["port:8000"], now + timedelta(days=2)) == []


def test_agent_slot_matches_dashboard_identity():
    from fleet.recording import server_identity
    from fleet_agent.schema import ServerInfo

    for base_url, argv in [("http://127.0.0.1:8123", ARGV), (None, ARGV + ["--port", "9001"]),
                           (None, ARGV + ["--uds", "/run/v.sock"]), (None, ARGV)]:
        info = ServerInfo(pid=1, argv=argv, base_url=base_url)
        assert slot_of(base_url, argv) == server_identity(info)
