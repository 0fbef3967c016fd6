"""The ``fleet-agent`` command line: enroll, config file, status."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from fa_fakenode import FakeNode
from test_delivery import Ingest

from fleet_agent import config as agent_config
from fleet_agent.cli import main

REPO = Path(__file__).parents[2]


@pytest.fixture
def ingest(tmp_path: Path):
    server = Ingest(tmp_path / "store.jsonl").start()
    yield server
    server.stop()


def test_enroll_stores_the_token_in_a_0600_config(tmp_path, ingest, monkeypatch, capsys):
    node = FakeNode(tmp_path / "root")
    path = tmp_path / "etc" / "config.toml"
    monkeypatch.setenv("FLEET_ENROLL_SECRET", "enroll-me")
    rc = main(["enroll", "--server", ingest.url, "--config", str(path), "--root", str(node.root),
               "--label", "team=inference", "--interval", "15"])
    assert rc == 0, capsys.readouterr().err
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    cfg = agent_config.load(path)
    assert (cfg.token, cfg.server_url, cfg.interval_s) == ("good-token", ingest.url, 15)
    assert cfg.labels == {"team": "inference"}


def test_enroll_with_a_wrong_secret_fails_and_writes_nothing(tmp_path, ingest, capsys):
    path = tmp_path / "config.toml"
    (tmp_path / "secret").write_text("nope\n")
    rc = main(["enroll", "--server", ingest.url, "--secret-file", str(tmp_path / "secret"),
               "--config", str(path)])
    assert rc == 1 and not path.exists()
    assert "403" in capsys.readouterr().err


def test_the_config_path_comes_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("FLEET_AGENT_CONFIG", str(tmp_path / "x.toml"))
    assert agent_config.config_path(None) == tmp_path / "x.toml"
    assert agent_config.config_path("/a.toml") == Path("/a.toml")


def test_a_config_round_trips_through_the_hand_written_toml(tmp_path):
    cfg = agent_config.AgentConfig(
        server_url="https://fleet.example", token='t"o\\k\x7fen', interval_s=45,
        labels={"rack": "b-12", "note": "line\nbreak"},
        servers=[agent_config.ServerOverride(match_port=8000, base_url="http://10.0.0.5:8000",
                                             api_key="sk-1"),
                 agent_config.ServerOverride(base_url="http://10.0.0.7:8000",
                                             argv=["vllm", "serve", "m/x"], pid=12)])
    agent_config.save(cfg, tmp_path / "c.toml")
    assert agent_config.load(tmp_path / "c.toml") == cfg


def test_a_bad_config_is_refused_with_the_key_named(tmp_path, capsys):
    path = tmp_path / "c.toml"
    path.write_text('interval_s = "often"\n')
    assert main(["collect", "--print", "--config", str(path)]) == 2
    assert "interval_s" in capsys.readouterr().err
    path.write_text('[[servers]]\nbase_url = "http://x:1"\n')
    assert main(["status", "--config", str(path)]) == 2
    assert "argv" in capsys.readouterr().err


def test_status_shows_servers_spool_and_last_outcome(tmp_path, capsys):
    node = FakeNode(tmp_path / "root")
    pids = node.add_vllm(["vllm", "serve", "m/x", "--port", "1"], listen=(1,))
    cfg = agent_config.AgentConfig(spool_dir=str(tmp_path / "spool"))
    agent_config.save(cfg, tmp_path / "c.toml")
    common = ["--config", str(tmp_path / "c.toml"), "--root", str(node.root),
              "--gpu-source", "none"]
    assert main(["collect", *common]) == 0
    capsys.readouterr()
    assert main(["status", *common]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["servers_now"][0]["pid"] == pids.server
    assert out["spool_depth"] == 1 and out["enrolled"] is False
    assert out["last_collect"]["servers"][0]["pid"] == pids.server


def test_the_console_script_entry_point_runs(tmp_path):
    env = {**os.environ, "FLEET_AGENT_CONFIG": str(tmp_path / "none.toml")}
    out = subprocess.run([sys.executable, "-m", "fleet_agent.cli", "--gpu-source", "none",
                          "collect", "--print"], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=60, check=True)
    assert json.loads(out.stdout)["gpu_error"].startswith("GPU collection disabled")
