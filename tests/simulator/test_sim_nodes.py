"""The simulated nodes are real enough for the real agent: discovery, versions, metrics."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from audit.kb import metrics
from audit.kb.metrics_window import window
from demo import seedfleet
from demo.exposition import render
from demo.timeline import Event, fleet_specs
from demo.traffic import TrafficState
from fleet_agent import config as agent_config


def _reports(sim) -> dict:
    out = {}
    for name, node in sim.nodes.items():
        agent_config.save(node.agent_config(None, None), node.config_path)
        node.write_nvml()
        out[name] = node.agent().build_report(None)
    return out


def test_the_real_agent_finds_every_simulated_server_with_its_version(build_fleet):
    sim = build_fleet()
    reports = _reports(sim)
    assert len(reports) >= 35  # 11 seed hosts + every case that runs a server
    for name, report in reports.items():
        spec = sim.nodes[name].spec
        assert report.host.hostname == name
        assert len(report.servers) == len(spec.servers), name
        for server, wanted in zip(report.servers, spec.servers, strict=True):
            assert server.vllm_version == wanted.version, name
            assert server.installed_vllm_version == (wanted.installed or wanted.version), name
            assert server.metrics is not None and "vllm:" in server.metrics.text, name
            assert not [e for e in server.errors if "not listening" in e], (name, server.errors)
            if wanted.container:
                assert server.container_image == wanted.container.image, name


def test_gpu_readings_follow_the_scenario_and_map_to_the_right_server(build_fleet):
    reports = _reports(build_fleet(include_cases=False))
    collapse = reports["gb10-spark-03"]
    push = reports["h100-push-01"]
    assert collapse.gpus[0].name == "NVIDIA GB10"
    assert collapse.gpus[0].memory_used_bytes / 1e9 == pytest.approx(110.6, abs=0.1)
    assert {g.uuid for g in push.gpus} == set(push.servers[0].gpu_uuids)  # TP=2 holds both
    light = reports["h100-light-01"]
    assert [s.gpu_uuids for s in light.servers] == [[light.gpus[0].uuid], [light.gpus[1].uuid]]


def test_the_cyankiwi_host_serves_its_bundled_template_from_the_hf_cache(build_fleet):
    report = _reports(build_fleet(include_cases=False))["h100-awq-07"]
    template = report.servers[0].chat_template
    assert template.source.startswith("hf-cache:cyankiwi/gemma-4-31B-it-AWQ-4bit@6f1b616c")
    assert template.size_bytes == 16934  # the frozen file's size; its hash cannot match


def _window(workload, version="0.25.1", seconds=600.0, k=3):
    start = time.time() - 3600
    state = TrafficState("m", version, workload, start, spec_k=k,
                         cache={"kv_cache_size_tokens": "85000"})
    state.advance(start + 1800)
    before = metrics.parse(render(state))
    state.advance(start + 1800 + seconds)
    return window(before, metrics.parse(render(state)), seconds)


def test_the_single_stream_eagle3_card_shows_the_seed_001_figures():
    w = _window(seedfleet.SEED001_LOAD, version=seedfleet.NIGHTLY, seconds=1800)
    assert w["spec_acceptance_rate"] == pytest.approx(0.47, abs=0.02)
    assert w["spec_mean_acceptance_length"] == pytest.approx(2.4, abs=0.1)
    assert w["itl_p50_s"] == pytest.approx(0.068, abs=0.005)
    assert w["generation_tps"] == pytest.approx(14.78, rel=0.1)
    assert w["requests_running"] == 1


def test_the_c256_collapse_shows_the_seed_003_signature():
    w = _window(seedfleet.C256_COLLAPSE)
    assert w["ttft_p50_s"] == pytest.approx(13.35, abs=1.0)
    assert w["requests_waiting"] > 50 and w["kv_cache_usage"] >= 0.97
    assert w["spec_acceptance_rate"] == pytest.approx(0.58, abs=0.02)


@pytest.mark.parametrize(("load", "tps", "tpot"), [(seedfleet.LIGHT_LOAD, 408, 0.141),
                                                   (seedfleet.PUSH_LOAD, 745, 0.078)])
def test_light_and_push_serve_the_measured_throughput_and_tpot(load, tps, tpot):
    w = _window(load)
    assert w["generation_tps"] == pytest.approx(tps, rel=0.08)
    assert w["tpot_p50_s"] == pytest.approx(tpot, rel=0.1)
    assert w["spec_acceptance_rate"] == pytest.approx(0.43, abs=0.02)


def test_a_tp2_restart_collapses_eagle3_acceptance_to_045_per_draft():
    server = seedfleet.tp_change_host().servers[0]
    w = _window(seedfleet.tp2_server(server).workload)
    assert w["spec_mean_acceptance_length"] - 1 == pytest.approx(0.45, abs=0.02)


@pytest.mark.parametrize(("version", "present", "absent"), [
    ("0.6.3", ["vllm:gpu_cache_usage_perc", "vllm:time_per_output_token_seconds_bucket"],
     ['engine="0"', "vllm:kv_cache_usage_perc", "spec_decode"]),
    ("0.10.0", ['engine="0"', "vllm:kv_cache_usage_perc"], ["vllm:inter_token_latency"]),
    ("0.25.1", ["vllm:inter_token_latency_seconds_bucket", 'finished_reason="repetition"'],
     ["vllm:time_per_output_token_seconds", "vllm:gpu_cache_usage_perc"]),
])
def test_each_version_is_served_in_its_naming_era(version, present, absent):
    state = TrafficState("m", version, seedfleet.LIGHT_LOAD, time.time() - 60, spec_k=3)
    state.advance(time.time())
    text = render(state)
    snapshot = metrics.parse(text)
    assert not snapshot.errors
    for name in present:
        assert name in text
    for name in absent:
        assert name not in text


def test_a_restarted_simulator_holds_the_state_the_timeline_reached(build_fleet, tmp_path: Path):
    timeline = (Event(0.0, "h100-chat-05", "restart", "restart"),
                Event(0.0, "h100-push-02", "upgrade", "upgrade"))
    specs = [s for s in seedfleet.seed_hosts() if s.hostname in ("h100-chat-05", "h100-push-02")]
    first = build_fleet(specs=specs, timeline=timeline)
    before = {n: [(r.pids.server, r.started_at, r.spec.version) for r in node.servers.values()]
              for n, node in first.nodes.items()}
    first.close()
    again = build_fleet(specs=specs, timeline=timeline)
    after = {n: [(r.pids.server, r.started_at, r.spec.version) for r in node.servers.values()]
             for n, node in again.nodes.items()}
    assert after == before
    assert after["h100-push-02"][0][2] == "0.27.0"


def test_case_hosts_do_not_all_share_one_kv_level():
    """Case hosts draw different KV sparklines, not one shared level."""
    from demo.casehosts import case_hosts

    levels = {s.workload.kv_usage for h in case_hosts() for s in h.servers
              if getattr(s, "workload", None) is not None}
    assert len(levels) >= 5


def test_a_node_whose_address_is_taken_on_its_port_still_serves_that_port(build_fleet):
    """Another simulator (or an emulator still closing) holding ``127.0.1.1:8000`` must not
    move the node's server off port 8000: its dashboard slot (``port:8000``) would change
    and a failed start (put on its argv port's slot) would land on another slot."""
    from demo.node import loopback_address

    specs = [s for s in seedfleet.seed_hosts() if s.hostname == "h100-upgrade-08"]
    port = specs[0].servers[0].port
    with socket.socket() as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the emulator
        try:
            squatter.bind((loopback_address(0), port))
            squatter.listen()
        except OSError:
            pass  # someone else listens there: the same situation
        sim = build_fleet(specs=specs, timeline=())
        emulator = sim.nodes["h100-upgrade-08"].servers["main"].emulator
        host, bound = emulator.httpd.server_address[:2]
        assert bound == port and host != loopback_address(0)
        assert emulator.base_url == f"http://{host}:{port}"


def test_a_first_run_starts_the_story_after_start_up_and_a_rerun_keeps_its_clock(
        build_fleet, tmp_path):
    """`make demo` builds and enrolls ~45 hosts before the story's first event (40 s); on a
    slow machine that start-up must not eat the story, so a first run restarts the clock
    once the fleet is enrolled. A re-run continues the story where the first one left it."""
    specs = fleet_specs(include_cases=False)[:1]
    base = tmp_path / "clock"
    first = build_fleet(base=base, specs=specs, timeline=())
    built_at = first.epoch
    time.sleep(0.05)  # start-up (emulators, enrollment) takes time
    first.start_clock_now()
    assert first.epoch > built_at
    started = first.epoch
    first.start_clock_now()  # only the first call of a first run moves it
    assert first.epoch == started
    first.close()
    rerun = build_fleet(base=base, specs=specs, timeline=())
    rerun.start_clock_now()
    assert rerun.epoch == started
