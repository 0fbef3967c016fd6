"""Server slot identity, the token bucket, and models staying in step with migrations."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fleet.ratelimit import check_rate
from fleet.recording import server_identity
from fleet_agent.schema import ServerInfo


@pytest.mark.parametrize(("base_url", "argv", "identity"), [
    ("http://127.0.0.1:8001", ["vllm", "serve", "m"], "port:8001"),
    ("http://0.0.0.0:8001", ["vllm", "serve", "m", "--port", "9"], "port:8001"),
    (None, ["vllm", "serve", "m", "--port", "8002"], "port:8002"),
    (None, ["python", "-m", "vllm.entrypoints.openai.api_server", "--port=8003"], "port:8003"),
    (None, ["vllm", "serve", "m", "--uds", "/run/vllm.sock"], "unix:/run/vllm.sock"),
    ("unix:/run/v.sock", ["vllm", "serve", "m"], "unix:/run/v.sock"),
    (None, ["vllm", "serve", "m"], "port:8000"),
])
def test_a_server_slot_is_named_by_its_port_or_socket(base_url, argv, identity):
    info = ServerInfo(pid=1, argv=argv, base_url=base_url)
    assert server_identity(info) == identity


def test_the_bucket_allows_a_burst_then_the_sustained_rate(settings):
    settings.INGEST_RATE, settings.INGEST_BURST = (1, 5), 3
    key, t = "unit-bucket", 1000.0
    assert [check_rate(key, t) for _ in range(3)] == [0, 0, 0]
    assert check_rate(key, t) == pytest.approx(5)
    assert check_rate(key, t + 5) == 0  # one slot refilled after 5 s
    assert check_rate(key, t + 5) > 0


def test_the_fleet_models_match_their_migrations():
    # A subprocess: pytest-django may disable migrations (--no-migrations) in this one.
    root = Path(__file__).resolve().parents[2]
    env = {"PATH": os.environ["PATH"], "HOME": "/tmp", "DEBUG": "true"}
    result = subprocess.run(
        [sys.executable, "manage.py", "makemigrations", "fleet", "--check", "--dry-run"],
        cwd=root, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
