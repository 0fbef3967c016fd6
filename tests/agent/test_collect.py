"""A whole collection cycle against fake nodes and emulated vLLM servers."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from fa_fakenode import FakeNode
from fa_gemma import API_KEY, HF_TOKEN

from demo.emulator import Behaviour, Emulator
from demo.paths import metrics_dir
from fleet_agent.config import AgentConfig, ServerOverride
from fleet_agent.schema import REDACTED, parse_report

FIXTURES = Path(__file__).parent / "fixtures"


def _by_pid(report) -> dict:
    return {s.pid: s for s in report.servers}


def test_every_real_case_is_reported_with_version_argv_and_metrics(case_node, run_collect):
    node, servers, emulators, config = case_node
    report = run_collect(node, config)
    parse_report(json.loads(report.model_dump_json()))
    got = _by_pid(report)
    assert set(got) == {s.pids.server for s in servers}
    for server, emu in zip(servers, emulators, strict=True):
        spec = server.case.server
        entry = got[server.pids.server]
        assert entry.vllm_version == spec.version
        assert entry.installed_vllm_version == spec.version
        assert entry.metrics is not None
        assert entry.metrics.text == server.capture.read_text()
        assert entry.container_image == (spec.container.image if spec.container else None)
        assert len(entry.argv) == len(spec.argv)
        assert entry.models[0].max_model_len == emu.behaviour.max_model_len == 65536


def test_case_argv_survives_unchanged_when_it_holds_no_secret(case_node, run_collect):
    node, servers, _, config = case_node
    got = _by_pid(run_collect(node, config))
    for server in servers:
        argv = list(server.case.server.argv)
        if "--api-key" not in argv:
            assert got[server.pids.server].argv == argv, server.case.name


def test_the_gemma_node_reports_templates_versions_and_redacted_secrets(gemma_node, run_collect):
    node, servers = gemma_node
    report = run_collect(node)
    got = _by_pid(report)
    assert len(report.servers) == 4
    for server in servers:
        entry = got[server.pids.server]
        assert entry.errors == [], (server.name, entry.errors)
        assert entry.vllm_version == server.running
        assert entry.installed_vllm_version == server.installed
        assert entry.chat_template.source == server.template_source
        assert entry.chat_template.sha256 == hashlib.sha256(server.template.encode()).hexdigest()
        assert entry.chat_template.size_bytes == len(server.template.encode())
        assert entry.metrics and entry.metrics.text.startswith("# source:")
    text = report.model_dump_json()
    assert HF_TOKEN not in text and API_KEY not in text
    seed_001 = got[servers[0].pids.server]
    assert seed_001.env["HF_TOKEN"] == REDACTED
    assert seed_001.container_image == "vllm/vllm-openai:cu130-nightly"
    assert seed_001.model_revision == servers[0].template_source.split("@")[1].split("/")[0]


def test_a_pending_upgrade_shows_as_installed_newer_than_running(gemma_node, run_collect):
    node, servers = gemma_node
    awq = _by_pid(run_collect(node))[servers[3].pids.server]
    assert (awq.vllm_version, awq.installed_vllm_version) == ("0.22.0", "0.23.1")


def test_the_servers_own_api_key_opens_v1_models_but_is_never_reported(gemma_node, run_collect):
    node, servers = gemma_node
    entry = _by_pid(run_collect(node))[servers[1].pids.server]
    assert entry.models[0].id == "nvidia/Gemma-4-26B-A4B-NVFP4"
    assert list(servers[1].emulator.behaviour.seen_auth) == [f"Bearer {API_KEY}"]
    assert entry.argv[entry.argv.index("--api-key") + 1] == REDACTED


def test_a_configured_api_key_is_used_when_the_server_hides_its_own(node: FakeNode,
                                                                    run_collect):
    emu = Emulator(Behaviour(version="0.28.0", model_id="m", root="m/x",
                             api_key="sk-from-config-000111"))
    try:
        pids = node.add_vllm(["vllm", "serve", "m/x", "--port", str(emu.port)],
                             listen=(emu.port,))
        without = run_collect(node).servers[0]
        assert any("/v1/models: HTTP 401" in e for e in without.errors)
        config = AgentConfig(servers=[ServerOverride(match_pid=pids.server,
                                                     api_key="sk-from-config-000111")])
        report = run_collect(node, config)
        assert report.servers[0].models[0].id == "m"
        assert "sk-from-config-000111" not in report.model_dump_json()
    finally:
        emu.stop()


def test_an_unreachable_server_is_still_reported_with_reasons(node: FakeNode, run_collect):
    node.add_vllm(["vllm", "serve", "m/x", "--port", "1"], listen=(1,))
    (entry,) = run_collect(node).servers
    assert entry.vllm_version is None and entry.metrics is None
    assert {e.split(":")[0] for e in entry.errors} >= {"GET /version", "GET /v1/models",
                                                       "GET /metrics"}


def test_gpus_are_mapped_to_the_server_owning_their_workers(node: FakeNode, run_collect):
    pids = node.add_vllm(["vllm", "serve", "google/gemma-4-31B-it", "-tp", "2"], tp=2,
                         pid=2300, engine_pid=2310, worker_pids=[2345, 2346])
    report = run_collect(node, gpu_source=str(FIXTURES / "nvml_h100x2.json"), probe_http=False)
    assert report.gpu_error is None
    assert [g.name for g in report.gpus] == ["NVIDIA H100 80GB HBM3"] * 2
    assert report.host.nvidia_driver_version == "580.95.05"
    assert report.host.cuda_driver_version == "13.0"
    assert report.servers[0].pid == pids.server
    assert report.servers[0].gpu_uuids == [g.uuid for g in report.gpus]


def test_two_single_gpu_replicas_each_own_one_gpu(node: FakeNode, run_collect, tmp_path):
    a = node.add_vllm(["vllm", "serve", "m/x", "--port", "8001"], listen=(8001,))
    b = node.add_vllm(["vllm", "serve", "m/x", "--port", "8002"], listen=(8002,))
    reading = json.loads((FIXTURES / "nvml_h100x2.json").read_text())
    reading["processes"][0]["pid"] = a.engine  # TP=1: the EngineCore holds the GPU
    reading["processes"][1]["pid"] = b.engine
    path = tmp_path / "reading.json"
    path.write_text(json.dumps(reading))
    got = _by_pid(run_collect(node, gpu_source=str(path), probe_http=False))
    assert got[a.server].gpu_uuids == [reading["gpus"][0]["uuid"]]
    assert got[b.server].gpu_uuids == [reading["gpus"][1]["uuid"]]


def test_without_nvml_the_gpu_error_is_set_and_the_rest_is_intact(gemma_node, run_collect):
    node, servers = gemma_node
    report = run_collect(node, gpu_source="nvml")
    if report.gpus:  # pragma: no cover - only on a machine with an NVIDIA driver
        return
    assert report.gpu_error and "NVML" in report.gpu_error
    assert len(report.servers) == 4 and all(s.metrics for s in report.servers)


def test_a_server_declared_in_the_config_is_reported_without_a_process(node: FakeNode,
                                                                       run_collect):
    emu = Emulator(Behaviour(version="0.29.0", model_id="g", root="google/gemma-4-31B-it",
                             metrics="vllm:num_requests_running 1\n"))
    try:
        argv = ["vllm", "serve", "google/gemma-4-31B-it", "--hf-token", "hf_abcdefghijkl"]
        config = AgentConfig(servers=[ServerOverride(base_url=emu.base_url, argv=argv, pid=7)])
        (entry,) = run_collect(node, config).servers
        assert entry.discovered is False and entry.pid == 7
        assert entry.vllm_version == "0.29.0"
        assert entry.argv[-1] == REDACTED
    finally:
        emu.stop()


def test_chat_template_flag_inline_and_missing_files(node: FakeNode, run_collect):
    node.write_file(None, "/workspace/llama_process/chat_template.jinja", "{{ x }}")
    node.add_vllm(["vllm", "serve", "m/x", "--chat-template",
                   "/workspace/llama_process/chat_template.jinja"], listen=())
    node.add_vllm(["vllm", "serve", "m/x", "--chat-template", "{{ messages }}"], listen=())
    node.add_vllm(["vllm", "serve", "m/x", "--chat-template", "gone.jinja"], listen=())
    node.add_vllm(["vllm", "serve", "org/not-cached"], listen=())
    absolute, inline, missing, uncached = run_collect(node, probe_http=False).servers
    assert absolute.chat_template.sha256 == hashlib.sha256(b"{{ x }}").hexdigest()
    assert inline.chat_template.source == "inline"
    assert inline.chat_template.size_bytes == len("{{ messages }}")
    assert missing.chat_template is None
    assert any("gone.jinja" in e for e in missing.errors)
    assert any("org/not-cached@main not in HF cache /root/.cache/huggingface/hub" in e
               for e in uncached.errors)


def test_a_pinned_revision_selects_that_snapshot(node: FakeNode, run_collect):
    cache = "/root/.cache/huggingface/hub"
    node.hf_snapshot(None, cache, "org/m", "a" * 40, {"chat_template.jinja": "main"})
    node.hf_snapshot(None, cache, "org/m", "b" * 40, {"chat_template.jinja": "v2"}, ref="v2")
    node.add_vllm(["vllm", "serve", "org/m", "--revision", "v2"], listen=(),
                  env={"HOME": "/root"})
    (entry,) = run_collect(node, probe_http=False).servers
    assert entry.chat_template.sha256 == hashlib.sha256(b"v2").hexdigest()
    assert entry.chat_template.revision == "b" * 40 == entry.model_revision


def test_collect_print_on_this_machine_prints_a_valid_empty_report(tmp_path, capsys):
    from fleet_agent.cli import main

    config = tmp_path / "none.toml"
    assert main(["collect", "--print", "--config", str(config)]) == 0
    report = parse_report(json.loads(capsys.readouterr().out))
    if shutil.which("nvidia-smi") is None:
        assert report.gpus == [] and report.gpu_error
    assert report.host.machine_id and report.agent.interval_s == 30


def test_an_invalid_gpu_entry_is_dropped_with_a_reason_not_the_report(node: FakeNode,
                                                                       run_collect, tmp_path):
    node.add_vllm(["vllm", "serve", "m/x"], listen=())
    reading = json.loads((FIXTURES / "nvml_h100x2.json").read_text())
    reading["gpus"][1]["compute_capability"] = "sm_90"
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(reading))
    report = run_collect(node, gpu_source=str(path), probe_http=False)
    assert [g.index for g in report.gpus] == [0]
    assert "GPU 1 dropped" in report.gpu_error
    assert len(report.servers) == 1


def test_a_server_still_loading_its_model_is_reported_without_waiting_on_every_endpoint(
        node: FakeNode, run_collect):
    import socket

    # vLLM binds its socket before the model loads but serves only afterwards: connections
    # are accepted by the kernel and never answered.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        port = sock.getsockname()[1]
        node.add_vllm(["vllm", "serve", "m/x", "--port", str(port)], listen=(port,))
        (entry,) = run_collect(node).servers
    assert entry.vllm_version is None and entry.metrics is None
    assert any(e.startswith("GET /version: timed out") for e in entry.errors)
    assert any("skipped, /version timed out" in e for e in entry.errors)


def test_a_report_over_the_size_limit_keeps_every_vllm_family(node: FakeNode, run_collect):
    from fleet_agent.schema import MAX_REPORT_BYTES

    real = (metrics_dir() / "inferstack-fixture_v0.29.0_qwen2.5-1.5b-t4.prom").read_text()
    noise = "".join(f'http_request_size_bytes_sum{{handler="/v1/x{i}"}} {i}.0\n'
                    for i in range(45_000))
    emus = [Emulator(Behaviour(version="0.29.0", model_id="m", root="m/x",
                               metrics=real + noise)) for _ in range(2)]
    try:
        for emu in emus:
            node.add_vllm(["vllm", "serve", "m/x", "--port", str(emu.port)], listen=(emu.port,))
        report = run_collect(node)
    finally:
        for emu in emus:
            emu.stop()
    assert len(report.model_dump_json().encode()) <= MAX_REPORT_BYTES
    vllm_lines = [ln for ln in real.splitlines() if ln.startswith("vllm:")]
    for entry in report.servers:
        kept = entry.metrics.text.splitlines()
        assert [ln for ln in kept if ln.startswith("vllm:")] == vllm_lines
        assert not any(ln.startswith(("http_", "python_", "process_")) for ln in kept)
        assert any("metrics trimmed" in e for e in entry.errors)
