"""``fleet-agent run --config X`` keeps its spool and state beside X when X names
no spool_dir, instead of writing under /var/lib/fleet-agent."""

from __future__ import annotations

from pathlib import Path

from fleet_agent import config as agent_config


def test_a_config_elsewhere_keeps_its_spool_and_state_beside_itself(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text('server_url = "http://127.0.0.1:8000"\n')
    cfg = agent_config.load(path)
    assert Path(cfg.spool_dir) == tmp_path / "spool"
    assert cfg.state_path == tmp_path / "state.json"
    assert "/var/lib/fleet-agent" not in cfg.spool_dir


def test_an_explicit_spool_dir_and_the_default_config_are_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text(f'spool_dir = "{tmp_path / "elsewhere"}"\n')
    assert agent_config.load(path).spool_dir == str(tmp_path / "elsewhere")
    default = agent_config.load(Path(agent_config.DEFAULT_CONFIG_PATH))
    assert default.spool_dir == agent_config.DEFAULT_SPOOL_DIR
