"""Discovery of vLLM API servers in a /proc tree built from real command lines."""

from __future__ import annotations

import json
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from fa_fakenode import BTIME, FakeNode

from demo.cases import place_cases
from demo.emulator import Behaviour, Emulator
from demo.paths import report_paths
from fleet_agent import discovery, procfs


def _found(node: FakeNode) -> list[discovery.ServerProcess]:
    table = procfs.scan(node.root)
    servers = discovery.find_servers(table)
    for server in servers:
        discovery.inspect(table, server)
    return servers


def test_it_finds_exactly_the_api_servers_of_every_real_case(node: FakeNode) -> None:
    placed = [pids for _, pids in place_cases(node)]
    reports = [json.loads(p.read_text()) for p in report_paths()]
    bench_cases = [r for r in reports if r["argv"][:2] == ["vllm", "bench"]]
    found = _found(node)
    assert {s.pid for s in found} == {pids.server for pids in placed}
    assert len(placed) == len(reports) - len(bench_cases)
    children = {p for pids in placed for p in [pids.engine, *pids.workers, *pids.helpers]}
    assert children.isdisjoint({s.pid for s in found})


def test_it_reads_the_kernel_argv_env_and_start_time(node: FakeNode) -> None:
    argv = ["/opt/vllm/bin/python3", "/opt/vllm/bin/vllm", "serve", "google/gemma-4-31B-it",
            "--max-model-len", "65536"]
    pids = node.add_vllm(argv, env={"CUDA_VISIBLE_DEVICES": "0,1"})
    (server,) = _found(node)
    assert server.pid == pids.server
    assert server.argv == argv
    assert server.env == {"CUDA_VISIBLE_DEVICES": "0,1"}
    expected = datetime.fromtimestamp(BTIME + (200000 + pids.server) / procfs.clock_ticks(),
                                      tz=timezone.utc)
    assert server.started_at == expected


def test_it_confirms_the_argv_port_against_the_listening_sockets(node: FakeNode) -> None:
    node.add_vllm(["vllm", "serve", "m/x", "--port=8011"], listen=(8011,))
    node.add_vllm(["vllm", "serve", "m/y", "--port", "8012"], listen=(9999,))
    ok, loading = _found(node)
    assert ok.base_url == "http://127.0.0.1:8011" and ok.listen_ports == {8011}
    assert not ok.errors
    assert loading.port == 8012
    assert any("8012" in e and "not listening" in e for e in loading.errors)


def test_it_uses_the_default_port_and_an_explicit_host(node: FakeNode) -> None:
    node.add_vllm(["vllm", "serve", "m/x", "--host", "10.1.2.3"])
    (server,) = _found(node)
    assert server.base_url == "http://10.1.2.3:8000"


def test_it_reaches_a_container_through_its_published_docker_port(node: FakeNode) -> None:
    cgroup = node.docker_container("ab" * 32, "vllm/vllm-openai:v0.22.0", {8000: 18080})
    node.add_vllm(["/usr/bin/python3", "/usr/local/bin/vllm", "serve", "m/x"], ns="ab" * 32,
                  cgroup=cgroup)
    (server,) = _found(node)
    assert server.container_image == "vllm/vllm-openai:v0.22.0"
    assert server.base_url == "http://127.0.0.1:18080"


def test_a_forked_copy_of_the_server_argv_is_not_a_second_server(node: FakeNode) -> None:
    pids = node.add_vllm(["vllm", "serve", "m/x"], tp=4, forked_copy=True)
    assert [s.pid for s in _found(node)] == [pids.server]


def test_vllm_bench_shell_wrappers_and_spawn_stubs_are_not_servers(node: FakeNode) -> None:
    node.add_process(5001, 1, ["/usr/bin/python3", "/usr/local/bin/vllm", "bench", "latency"])
    node.add_process(5002, 1, ["bash", "-c", "vllm serve m/x --port 8000"])
    node.add_process(5003, 1, ["python3", "-c", "from multiprocessing.spawn import spawn_main",
                               "--multiprocessing-fork"])
    node.add_process(5004, 1, ["VLLM::APIServer_1"])
    assert _found(node) == []


def test_a_unix_socket_server_is_probed_through_its_mount_namespace() -> None:
    # AF_UNIX paths are limited to 107 bytes, so this node lives in a short temp dir.
    with tempfile.TemporaryDirectory(dir="/tmp", prefix="fa") as tmp:
        node = FakeNode(Path(tmp))
        sock = Path(tmp) / "run" / "v.sock"
        sock.parent.mkdir()
        emu = Emulator(Behaviour(version="0.28.0", model_id="m", root="m/x"), uds=str(sock))
        try:
            node.add_vllm(["vllm", "serve", "m/x", "--uds", "/run/v.sock"], listen=())
            (server,) = _found(node)
            assert server.base_url == "unix:/run/v.sock"
            from fleet_agent.probe import probe
            assert probe(server.connect_url).version == "0.28.0"
        finally:
            emu.stop()


def test_an_unreadable_environ_is_an_error_not_a_crash(node: FakeNode) -> None:
    pids = node.add_vllm(["vllm", "serve", "m/x"])
    environ = node.root / "proc" / str(pids.server) / "environ"
    environ.unlink()
    (server,) = _found(node)
    assert server.env is None
    assert any("environ" in e for e in server.errors)


def test_it_reads_the_port_from_a_config_yaml(node: FakeNode) -> None:
    node.write_file(None, "/srv/cfg/serve.yaml", "model: m/x\nport: 8123\nhost: 127.0.0.1\n")
    node.add_vllm(["vllm", "serve", "--config", "serve.yaml"], cwd="/srv/cfg", listen=(8123,))
    (server,) = _found(node)
    assert server.base_url == "http://127.0.0.1:8123"
    assert json.dumps(server.errors) == "[]"
