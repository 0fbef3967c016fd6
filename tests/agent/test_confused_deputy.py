"""The agent never reads for another user what that user could not.

A local user (uid 4242 here) runs a fake ``vllm serve`` naming root-only files in its argv.
The agent holds CAP_DAC_READ_SEARCH, so only its own check stands between that argv and
``/root``: the files must not be read, parsed, echoed in errors, hashed or probed. The
fake /proc tree gives the process its uid in ``status``, as the kernel does; the "root"
files belong to whoever runs the tests, which that uid is not.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from fa_fakenode import FakeNode

from fleet_agent import collect as collect_module
from fleet_agent.config import AgentConfig, ServerOverride

OTHER_UID = 4242
SECRET = "db_password: hunter2-root-only\nport: SECRET-PORT-CONTENT\nhost: internal.example\n"


def _open_up(node: FakeNode) -> None:
    """The namespace root and /etc, /srv, /tmp searchable by anyone, like a real node's."""
    for directory in (node.root, node.root / "etc", node.root / "srv", node.root / "tmp"):
        directory.mkdir(parents=True, exist_ok=True)
        directory.chmod(0o755)


def _root_only(node: FakeNode, path: str, content: str, mode: int = 0o600) -> Path:
    """A file owned by the test's user (root on a node) that OTHER_UID may not read."""
    target = node.write_file(None, path, content)
    target.chmod(mode)
    return target


@pytest.fixture
def deputy_node(node: FakeNode) -> FakeNode:
    assert os.getuid() != OTHER_UID
    _open_up(node)
    return node


def _report_text(report) -> str:
    return report.model_dump_json()


def test_files_named_by_another_users_argv_are_not_read_hashed_or_echoed(deputy_node,
                                                                         run_collect):
    node = deputy_node
    _root_only(node, "/etc/root-only.yaml", SECRET)
    _root_only(node, "/etc/root-only.jinja", "{{ root only }}")
    root_home = node.root / "root"
    root_home.mkdir(exist_ok=True)
    root_home.chmod(0o700)  # /root: only root may search it
    _root_only(node, "/root/public-inside.jinja", "{{ world readable, unreachable }}", 0o644)
    os.symlink("/root/public-inside.jinja", node.root / "tmp" / "link.jinja")
    pids = [
        node.add_vllm(["vllm", "serve", "org/m", "--config", "/etc/root-only.yaml",
                       "--chat-template", "/etc/root-only.jinja"], listen=(), uid=OTHER_UID,
                      gid=OTHER_UID + 1).server,
        node.add_vllm(["vllm", "serve", "org/m", "--chat-template",
                       "/root/public-inside.jinja"], listen=(), uid=OTHER_UID,
                      gid=OTHER_UID + 1).server,
        node.add_vllm(["vllm", "serve", "org/m", "--chat-template", "/tmp/link.jinja"],
                      listen=(), uid=OTHER_UID, gid=OTHER_UID + 1).server,
    ]
    report = run_collect(node, probe_http=False)
    text = _report_text(report)
    by_pid = {s.pid: s for s in report.servers}
    assert set(by_pid) == set(pids)
    for server in by_pid.values():
        assert server.chat_template is None
    for content in ("{{ root only }}", "{{ world readable, unreachable }}", SECRET):
        assert hashlib.sha256(content.encode()).hexdigest() not in text
    assert "hunter2" not in text and "SECRET-PORT-CONTENT" not in text
    assert "internal.example" not in text  # a host named in the file is never probed


def test_files_the_process_may_read_are_still_read(deputy_node, run_collect):
    node = deputy_node
    template = node.write_file(None, "/srv/templates/chat.jinja", "{{ shared }}")
    template.parent.chmod(0o755)
    template.chmod(0o644)
    _root_only(node, "/srv/templates/group.jinja", "{{ team }}", 0o640)  # our group
    config = _root_only(node, "/srv/templates/serve.yaml", "port: 9001\n", 0o644)
    assert config.exists()
    world = node.add_vllm(["vllm", "serve", "org/m", "--chat-template",
                           "/srv/templates/chat.jinja", "--config",
                           "/srv/templates/serve.yaml"], listen=(), uid=OTHER_UID).server
    team = node.add_vllm(["vllm", "serve", "org/m", "--chat-template",
                          "/srv/templates/group.jinja"], listen=(), uid=OTHER_UID,
                         gid=os.getgid()).server
    by_pid = {s.pid: s for s in run_collect(node, probe_http=False).servers}
    assert by_pid[world].chat_template.sha256 == hashlib.sha256(b"{{ shared }}").hexdigest()
    assert by_pid[world].base_url.endswith(":9001")
    assert by_pid[team].chat_template.sha256 == hashlib.sha256(b"{{ team }}").hexdigest()


def test_a_port_error_from_a_config_file_does_not_quote_the_file(deputy_node, run_collect):
    node = deputy_node
    node.write_file(None, "/srv/serve.yaml", "port: not-a-number-SECRETISH\n").chmod(0o644)
    node.add_vllm(["vllm", "serve", "org/m", "--config", "/srv/serve.yaml"], listen=())
    (entry,) = run_collect(node, probe_http=False).servers
    assert "SECRETISH" not in _report_text(run_collect(node, probe_http=False))
    assert any("in --config is not a number" in e for e in entry.errors)


@pytest.mark.parametrize(("host", "sent"), [("127.0.0.1", True), ("localhost", True),
                                             ("::1", True), ("203.0.113.9", False),
                                             ("collector.example", False)])
def test_a_configured_api_key_goes_only_to_loopback_or_the_configured_url(
        node, run_collect, monkeypatch, host, sent):
    calls: list[tuple[str, str | None]] = []

    def fake_probe(url, api_key=None):
        calls.append((url, api_key))
        return collect_module.probe.ProbeResult()

    monkeypatch.setattr(collect_module.probe, "probe", fake_probe)
    node.add_vllm(["vllm", "serve", "org/m", "--host", host, "--port", "8000"])
    config = AgentConfig(servers=[ServerOverride(match_port=8000, api_key="sk-configured")])
    (entry,) = run_collect(node, config).servers
    [(url, key)] = calls
    assert (key == "sk-configured") is sent, (url, key)
    if not sent:
        assert any("api_key not sent" in e for e in entry.errors)
    assert "sk-configured" not in _report_text(run_collect(node, config))


def test_the_configured_base_url_gets_the_key_wherever_it_is(node, run_collect, monkeypatch):
    calls: list[tuple[str, str | None]] = []
    monkeypatch.setattr(collect_module.probe, "probe",
                        lambda url, api_key=None: calls.append((url, api_key))
                        or collect_module.probe.ProbeResult())
    node.add_vllm(["vllm", "serve", "org/m", "--host", "10.1.2.3"])
    config = AgentConfig(servers=[ServerOverride(match_port=8000, api_key="sk-configured",
                                                 base_url="https://vllm.internal:8443")])
    run_collect(node, config)
    assert calls == [("https://vllm.internal:8443", "sk-configured")]


def test_the_systemd_unit_forbids_debug_syscalls():
    script = (Path(collect_module.__file__).parent / "install.sh").read_text()
    assert "SystemCallFilter=~@debug" in script
