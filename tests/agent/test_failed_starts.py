"""The agent sees failed starts: a fake systemd (systemctl/journalctl executables in a temp
PATH), a fake Docker Engine API on a unix socket, and a vLLM process that vanished.

The error lines are real ones quoted in public vLLM reports (tests/data/failed_start_lines.json,
each with its URL). Nothing here talks to the real systemd or Docker daemon.
"""

from __future__ import annotations

import json
import shutil
import socketserver
import struct
import sys
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from fleet_agent import failed_starts as fs
from fleet_agent.collect import CycleInput, collect
from fleet_agent.config import AgentConfig
from fleet_agent.schema import REDACTED, Report

DATA = json.loads((Path(__file__).parents[1] / "data" / "failed_start_lines.json").read_text())
REAL_LINES = [row["line"] for row in DATA["lines"]]
SECRET = "hf_SuperSecretTokenValue123"
KV_LINE = next(r["line"] for r in DATA["lines"] if "stored in KV cache" in r["line"])
HEADS_LINE = REAL_LINES[0]

#: A journal of a unit that crash-loops after an upgrade: start-up noise, a request log line
#: that carries a prompt (must never be sent), a traceback and the real error line.
JOURNAL = [
    "INFO 11-30 10:00:01 [api_server.py:1] vLLM API server version 0.30.0",
    f"INFO 11-30 10:00:01 [api_server.py:2] non-default args: {{'api_key': '{SECRET}', "
    "'max_model_len': 131072}",
    "ERROR 11-30 10:00:02 [logger.py:39] Received request chatcmpl-1: prompt: 'my secret plan'",
    "Traceback (most recent call last):",
    '  File "/opt/vllm/lib/python3.12/site-packages/vllm/engine/arg_utils.py", line 10',
    KV_LINE,
]


def _write_exe(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text(f"#!{sys.executable}\n{body}")
    path.chmod(0o755)


@pytest.fixture
def fake_systemd(tmp_path: Path) -> fs.Sources:
    """systemctl knows two units: a crash-looping vLLM server and an unrelated nginx;
    journalctl serves JOURNAL for the vLLM unit."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    show = (
        "Id=vllm-gemma.service\n"
        "ExecStart={ path=/opt/vllm/bin/vllm ; argv[]=/opt/vllm/bin/vllm serve google/gemma-4 "
        f"--port 8001 --max-model-len 131072 --api-key {SECRET} ; ignore_errors=no ; "
        "start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }\n"
        "ActiveState=activating\nSubState=auto-restart\nResult=exit-code\nNRestarts=7\n"
        "ExecMainStatus=1\nExecMainExitTimestamp=@1764496800\n\n"
        "Id=nginx.service\nExecStart={ path=/usr/sbin/nginx ; argv[]=/usr/sbin/nginx ; }\n"
        "ActiveState=failed\nSubState=failed\nResult=exit-code\nNRestarts=3\nExecMainStatus=1\n")
    _write_exe(bin_dir, "systemctl", f"""
import sys
if sys.argv[1] == "list-units":
    print("vllm-gemma.service loaded activating auto-restart vLLM Gemma")
    print("vllm-stopped.service loaded inactive dead stopped by the operator")
    print("nginx.service loaded failed failed nginx")
elif sys.argv[1] == "show":
    assert "vllm-gemma.service" in sys.argv and "nginx.service" in sys.argv, sys.argv
    sys.stdout.write({show!r})
""")
    rows = [json.dumps({"MESSAGE": line, "__REALTIME_TIMESTAMP": "1764496800000000"})
            for line in JOURNAL]
    rows.append(json.dumps({"MESSAGE": list(b"RuntimeError: CUDA error: bytes \xff")}))
    _write_exe(bin_dir, "journalctl", f"""
import sys
assert sys.argv[1:3] == ["-u", "vllm-gemma.service"], sys.argv
assert "--no-pager" in sys.argv and "json" in sys.argv
print({chr(10).join(rows)!r})
""")
    return fs.Sources(path=str(bin_dir), docker_sockets=())


def test_systemd_unit_crash_loop_reported_with_error_lines(fake_systemd: fs.Sources) -> None:
    found: set[str] = set()
    entries, notes = fs.collect_failed_starts(fake_systemd, None, [], found)
    assert notes == []
    assert len(entries) == 1, "nginx is not a vLLM unit; vllm-stopped was stopped cleanly"
    entry = entries[0]
    assert entry["source"] == "systemd" and entry["unit_or_container"] == "vllm-gemma.service"
    assert entry["restart_count"] == 7 and entry["exit_code"] == 1
    assert entry["state"] == "activating/auto-restart"
    assert entry["last_exit_at"].startswith("2025-11-30T10:00:00")
    assert entry["argv"][:4] == ["/opt/vllm/bin/vllm", "serve", "google/gemma-4", "--port"]
    assert entry["argv"][entry["argv"].index("--api-key") + 1] == REDACTED
    assert entry["lines"][-2] == KV_LINE
    assert "Traceback (most recent call last):" in entry["lines"]
    text = json.dumps(entry)
    assert SECRET not in text and "my secret plan" not in text
    assert "vLLM API server version" not in text, "INFO lines are not error lines"


def test_journal_non_utf8_message_is_decoded(fake_systemd: fs.Sources) -> None:
    entries, _ = fs.collect_failed_starts(fake_systemd, None, [], set())
    assert entries[0]["lines"][-1].startswith("RuntimeError: CUDA error: bytes")


def test_missing_systemctl_is_silent_and_failing_one_is_noted(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    entries, notes = fs.collect_failed_starts(fs.Sources(path=str(empty), docker_sockets=()),
                                              None, [], set())
    assert entries == [] and notes == []
    _write_exe(empty, "systemctl", "import sys; sys.stderr.write('bus down'); sys.exit(1)")
    entries, notes = fs.collect_failed_starts(fs.Sources(path=str(empty), docker_sockets=()),
                                              None, [], set())
    assert entries == [] and "bus down" in notes[0]


def test_lines_are_bounded_and_request_logs_dropped() -> None:
    raw = [f"ERROR line {i} " + "x" * 2000 for i in range(500)]
    raw += ["INFO Received request cmpl-abc: prompt: 'ValueError: secret'",
            "DEBUG prompt_token_ids: [1, 2, 3] RuntimeError"]
    lines = fs.clean_lines(raw)
    assert 0 < len(lines) <= fs.MAX_LINES
    assert all(len(line) <= fs.MAX_LINE_CHARS for line in lines)
    assert lines[-1].startswith("ERROR line 499")
    assert sum(len(line.encode()) + 1 for line in lines) <= fs.MAX_ENTRY_LINE_BYTES
    assert not any("prompt" in line for line in lines)
    short = fs.clean_lines([f"RuntimeError {i}" for i in range(100)] + raw[-2:])
    assert short == [f"RuntimeError {i}" for i in range(100 - fs.MAX_LINES, 100)]


def test_every_real_error_line_is_kept() -> None:
    # one failed start keeps at most MAX_LINES lines, so the quoted lines go in small batches
    for start in range(0, len(REAL_LINES), 10):
        batch = REAL_LINES[start:start + 10]
        assert fs.clean_lines(batch) == [line[:fs.MAX_LINE_CHARS] for line in batch]


def test_line_redaction_uses_the_agent_rules() -> None:
    found: set[str] = set()
    line = fs.redact_line(f"ERROR bad --hf-token {SECRET} url=https://u:pw0rd123@h/x "
                          f"{{'hf_token': '{SECRET}'}}", found)
    assert SECRET not in line and "pw0rd123" not in line
    assert SECRET in found


# ----------------------------------------------------------------------------- fake Docker


class _DockerHandler(BaseHTTPRequestHandler):
    containers: dict = {}
    logs: dict = {}

    def address_string(self) -> str:  # unix sockets have no (host, port)
        return "unix"

    def log_message(self, *_args) -> None:
        pass

    def _json(self, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - http.server API
        url = urlsplit(self.path)
        parts = url.path.strip("/").split("/")
        if parts == ["containers", "json"]:
            assert parse_qs(url.query).get("all") == ["1"]
            return self._json([{"Id": cid, "Image": c["Config"]["Image"],
                                "Command": " ".join(c["Config"]["Cmd"])}
                               for cid, c in self.containers.items()])
        if len(parts) == 3 and parts[2] == "json":
            return self._json(self.containers[parts[1]])
        if len(parts) == 3 and parts[2] == "logs":
            body = b"".join(struct.pack(">BxxxI", 2, len(chunk)) + chunk
                            for chunk in (line.encode() + b"\n" for line in self.logs[parts[1]]))
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return None
        self.send_error(404)
        return None


class _UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


def _container(image: str, cmd: list[str], status: str, restarts: int, code: int) -> dict:
    return {"Name": f"/{image.split('/')[-1].split(':')[0]}", "RestartCount": restarts,
            "State": {"Status": status, "ExitCode": code, "Restarting": status == "restarting",
                      "FinishedAt": "2026-11-30T10:00:00.123456789Z"},
            "Config": {"Image": image, "Entrypoint": ["vllm", "serve"], "Cmd": cmd, "Tty": False}}


@pytest.fixture
def fake_docker(tmp_path: Path):
    """A Docker Engine API on a unix socket: a restarting vLLM container (real error line
    plus a request log line), a healthy vLLM container and an unrelated one."""
    handler = type("H", (_DockerHandler,), {
        "containers": {
            "a" * 64: _container("vllm/vllm-openai:v0.30.0",
                                 ["Qwen/Qwen3-8B", "--tensor-parallel-size", "3",
                                  "--port", "8002", f"--api-key={SECRET}"],
                                 "restarting", 12, 1),
            "b" * 64: _container("vllm/vllm-openai:v0.29.0", ["m", "--port", "8003"],
                                 "running", 0, 0),
            "d" * 64: _container("vllm/vllm-openai:v0.28.0", ["m", "--port", "8004"],
                                 "exited", 3, 143),  # docker stop: not a failed start
            "c" * 64: {**_container("redis:7", ["redis-server"], "exited", 4, 1),
                       "Config": {"Image": "redis:7", "Cmd": ["redis-server"]}},
        },
        "logs": {"a" * 64: ["INFO 11-30 starting", "INFO Received request x: prompt: 'hi'",
                            "Traceback (most recent call last):", HEADS_LINE]},
    })
    path = tmp_path / "docker.sock"
    server = _UnixHTTPServer(str(path), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield str(path)
    server.shutdown()
    server.server_close()


def test_docker_restarting_vllm_container_reported(fake_docker: str, tmp_path: Path) -> None:
    src = fs.Sources(path=str(tmp_path), systemd=False,
                     docker_sockets=(("docker", fake_docker),
                                     ("podman", str(tmp_path / "absent.sock"))))
    entries, notes = fs.collect_failed_starts(src, None, [], set())
    assert notes == [], "an absent socket is no Docker, not an error"
    assert len(entries) == 1
    entry = entries[0]
    assert entry["source"] == "docker" and entry["unit_or_container"] == "vllm-openai"
    assert entry["image"] == "vllm/vllm-openai:v0.30.0"
    assert entry["restart_count"] == 12 and entry["exit_code"] == 1
    assert entry["state"] == "restarting"
    assert entry["argv"][-1] == f"--api-key={REDACTED}"
    assert entry["lines"] == ["Traceback (most recent call last):", HEADS_LINE]
    assert entry["last_exit_at"].startswith("2026-11-30T10:00:00")


def test_demultiplex_accepts_raw_text() -> None:
    assert fs.demultiplex(b"plain text\n") == "plain text\n"
    framed = struct.pack(">BxxxI", 1, 3) + b"ab\n" + struct.pack(">BxxxI", 2, 2) + b"c\n"
    assert fs.demultiplex(framed) == "ab\nc\n"


# ----------------------------------------------------------------------------- in a report


def test_vanished_process_and_report_contract(node) -> None:
    """A server seen in cycle 1 whose process is gone in cycle 2 is a failed start of source
    ``process`` in the validated report; a server still running is not."""
    pids = node.add_vllm(["/usr/bin/python3", "/opt/v/bin/vllm", "serve", "m",
                          "--port", "8005", "--api-key", SECRET], listen=(8005,))
    memory = fs.ProcessMemory()
    first = collect(CycleInput(config=AgentConfig(), root=node.root, gpu_source="none",
                               probe_http=False, process_memory=memory))
    assert first.failed_starts == []
    shutil.rmtree(node.root / "proc" / str(pids.server))
    second = collect(CycleInput(config=AgentConfig(), root=node.root, gpu_source="none",
                                probe_http=False, process_memory=memory))
    assert [f.source for f in second.failed_starts] == ["process"]
    gone = second.failed_starts[0]
    assert gone.argv[-1] == REDACTED and gone.state == "exited" and gone.last_exit_at
    body = second.model_dump_json()
    assert SECRET not in body
    assert Report.model_validate_json(body).failed_starts[0].argv == gone.argv


def test_a_socket_that_refuses_is_noted(tmp_path: Path) -> None:
    stale = tmp_path / "docker.sock"
    stale.write_text("")  # exists, nothing listens: e.g. no permission or a dead daemon
    src = fs.Sources(systemd=False, docker_sockets=(("docker", str(stale)),))
    entries, notes = fs.collect_failed_starts(src, None, [], set())
    assert entries == [] and notes and notes[0].startswith("docker: cannot connect")


def test_a_private_key_logged_line_by_line_is_not_kept() -> None:
    body = ["b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtz",
            "RuntimeErrorZ2VtaW5pLWtleS1ib2R5LWxpbmUtdHdvLWxvb2tzLWxpa2UtYmFzZTY0"]
    raw = ["ERROR loading key -----BEGIN OPENSSH PRIVATE KEY-----", *body,
           "-----END OPENSSH PRIVATE KEY-----", "RuntimeError: engine failed to start"]
    kept = fs.clean_lines(raw)
    assert not [line for line in kept for b in body if b[20:40] in line]
    assert kept[-1] == "RuntimeError: engine failed to start"
    cut = fs.clean_lines(["ERROR -----BEGIN RSA PRIVATE KEY-----", body[1],
                          "RuntimeError: CUDA out of memory"])
    assert cut == ["RuntimeError: CUDA out of memory"]
