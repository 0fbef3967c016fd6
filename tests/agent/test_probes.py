"""Live probes against the demo's vLLM emulator, each faulty shape and its healthy
twin; a server with no probe request never receives a POST."""

from __future__ import annotations

import time

import pytest

from demo.emulator import Behaviour, Emulator
from demo.traffic import TrafficState, Workload
from fleet_agent import deliver, probes
from fleet_agent.schema import PROBE_NAMES, ProbeOutcome

IDLE = Workload(gen_tps=0.0, prompt_len=100, gen_len=50, ttft_s=0.1, tpot_s=0.02, running=0)


def _emulator(faults=(), draft_acceptance=None, api_key=None) -> Emulator:
    state = TrafficState(model_name="google/gemma-4-31B-it", version="0.30.0", workload=IDLE,
                         started_at=time.time(), spec_k=3 if draft_acceptance is not None else 0)
    return Emulator(Behaviour(version="0.30.0", model_id="google/gemma-4-31B-it",
                              root="google/gemma-4-31B-it", max_model_len=65536, state=state,
                              api_key=api_key, faults=set(faults),
                              draft_acceptance=draft_acceptance))


@pytest.fixture
def make_emulator():
    started: list[Emulator] = []

    def make(**kwargs) -> Emulator:
        emu = _emulator(**kwargs)
        started.append(emu)
        return emu
    yield make
    for emu in started:
        emu.stop()


def _outcomes(emu: Emulator, names=PROBE_NAMES, api_key=None) -> dict[str, dict]:
    results = probes.run_probes(emu.base_url, "google/gemma-4-31B-it", list(names), api_key)
    for result in results:
        ProbeOutcome.model_validate(result)  # every result fits the wire schema
    return {r["name"]: r for r in results}


@pytest.mark.parametrize(("fault", "name"), [
    ("stream_turn_leak", "stream_control_tokens"),
    ("tool_choice_prose", "forced_tool_choice"),
    ("cot_leak", "tool_continuation_cot"),
    ("template_drops_tool", "template_identity"),
])
def test_fault_confirmed_and_healthy_twin_not_reproduced(make_emulator, fault, name):
    faulty = _outcomes(make_emulator(faults={fault}), [name])[name]
    healthy = _outcomes(make_emulator(), [name])[name]
    assert faulty["outcome"] == "confirmed", faulty
    assert healthy["outcome"] == "not_reproduced", healthy
    assert faulty["evidence"] and len(faulty["evidence"]) <= probes.EVIDENCE_CHARS


def test_stream_evidence_names_the_leaked_token(make_emulator):
    result = _outcomes(make_emulator(faults={"stream_turn_leak"}), ["stream_control_tokens"])
    assert "<turn|>" in result["stream_control_tokens"]["evidence"]


def test_draft_acceptance_collapse_from_server_counters(make_emulator):
    collapsed = _outcomes(make_emulator(draft_acceptance=0.05), ["draft_acceptance"])
    healthy = _outcomes(make_emulator(draft_acceptance=0.7), ["draft_acceptance"])
    no_spec = _outcomes(make_emulator(), ["draft_acceptance"])
    assert collapsed["draft_acceptance"]["outcome"] == "confirmed"
    assert "acceptance 0.05" in collapsed["draft_acceptance"]["evidence"]
    assert healthy["draft_acceptance"]["outcome"] == "not_reproduced"
    assert no_spec["draft_acceptance"]["outcome"] == "skipped"


def test_api_key_sent_and_never_in_evidence(make_emulator):
    emu = make_emulator(faults={"tool_choice_prose"}, api_key="sk-probe-secret")
    without = _outcomes(emu, ["forced_tool_choice"])["forced_tool_choice"]
    assert without["outcome"] == "error" and "401" in without["evidence"]
    with_key = _outcomes(emu, ["forced_tool_choice"], api_key="sk-probe-secret")
    assert with_key["forced_tool_choice"]["outcome"] == "confirmed"


def test_unreachable_server_is_an_error_not_an_exception():
    result = probes.run_probes("http://127.0.0.1:9", "m", ["stream_control_tokens"])[0]
    assert result["outcome"] == "error"


def test_probe_requests_read_from_report_answer():
    body = ('{"report_id": "x", "probes": [{"server": "port:8000", "names": '
            '["stream_control_tokens", "rm -rf"]}, {"server": 5}, "junk"]}')
    assert deliver.probe_requests(body) == {"port:8000": ["stream_control_tokens"]}
    assert deliver.probe_requests('{"report_id": "x"}') == {}
    assert deliver.probe_requests("not json") == {}


@pytest.mark.parametrize(("base_url", "argv", "slot"), [
    ("http://127.0.0.1:8001", ["vllm", "serve", "m"], "port:8001"),
    (None, ["vllm", "serve", "m", "--port", "9000"], "port:9000"),
    (None, ["vllm", "serve", "m", "--uds=/run/v.sock"], "unix:/run/v.sock"),
    (None, ["vllm", "serve", "m"], "port:8000"),
])
def test_slot_matches_dashboard_identity(base_url, argv, slot):
    assert probes.slot_of(base_url, argv) == slot


def test_cycle_probes_only_the_requested_server(make_emulator, node):
    """A collection with a probe request for one server: that server's report entry carries
    the results; the other server (probes off) receives no POST at all."""
    from fleet_agent.collect import CycleInput, collect
    from fleet_agent.config import AgentConfig, ServerOverride

    asked = make_emulator(faults={"stream_turn_leak"})
    off = make_emulator(faults={"stream_turn_leak"})
    config = AgentConfig(servers=[
        ServerOverride(base_url=emu.base_url, argv=["vllm", "serve", "google/gemma-4-31B-it"])
        for emu in (asked, off)])
    slot = probes.slot_of(asked.base_url, [])
    report = collect(CycleInput(config=config, root=node.root, gpu_source="none",
                                probe_requests={slot: ["stream_control_tokens"]}))
    by_url = {s.base_url: s for s in report.servers}
    (result,) = by_url[asked.base_url].probes
    assert result.outcome == "confirmed" and result.name == "stream_control_tokens"
    assert by_url[off.base_url].probes == []
    assert off.behaviour.posts == 0 and asked.behaviour.posts == 1
    plain = collect(CycleInput(config=config, root=node.root, gpu_source="none"))
    assert all(s.probes == [] for s in plain.servers)
    assert asked.behaviour.posts == 1  # no request, no probe
