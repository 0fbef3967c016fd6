"""The agent's re-install and uninstall against a live dashboard: a
re-install sends the config's token and replaces it without an approval; ``fleet-agent revoke``
(the uninstall) kills it on the dashboard."""

from __future__ import annotations

from pathlib import Path

import pytest
from fa_fakenode import FakeNode

from fleet.models import AgentToken, EnrollmentSecret
from fleet_agent import config as agent_config
from fleet_agent.cli import main


@pytest.mark.django_db(transaction=True)
def test_the_agent_reinstalls_and_uninstalls_against_a_live_dashboard(
        live_server, tmp_path: Path) -> None:
    node = FakeNode(tmp_path / "root")
    path = tmp_path / "config.toml"
    _, secret = EnrollmentSecret.create("rack-a", max_uses=2)
    (tmp_path / "secret").write_text(secret + "\n")
    args = ["enroll", "--server", live_server.url, "--secret-file", str(tmp_path / "secret"),
            "--config", str(path), "--root", str(node.root)]
    assert main(args) == 0
    first = agent_config.load(path).token
    assert main(args) == 0  # re-install: the config's token goes along, no approval needed
    second = agent_config.load(path).token
    assert AgentToken.live().get().token_hash != AgentToken.objects.get(
        revoked_at__isnull=False).token_hash
    assert AgentToken.authenticate(first) is None and AgentToken.authenticate(second)
    assert main(["revoke", "--config", str(path), "--root", str(node.root)]) == 0
    assert AgentToken.authenticate(second) is None
    assert agent_config.load(path).token is None
