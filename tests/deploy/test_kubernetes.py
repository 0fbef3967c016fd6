"""The agent's DaemonSet validates against the Kubernetes versions in support and keeps the
privileges the agent needs and no others (``deploy/kubernetes/agent/fleet-agent-daemonset.yaml``).

Schemas come with ``kubernetes-validate`` (no network); the supported versions are the four
newest minors it ships (Kubernetes supports the three newest minors, one more is kept for
clusters mid-upgrade).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

kubernetes_validate = pytest.importorskip("kubernetes_validate")  # the `test` extra has it

MANIFEST = (Path(__file__).resolve().parents[2]
            / "deploy/kubernetes/agent/fleet-agent-daemonset.yaml")


def supported_versions() -> list[str]:
    """The four newest Kubernetes minors whose schemas kubernetes-validate ships."""
    minors = sorted({tuple(int(p) for p in v.split(".")[:2])
                     for v in kubernetes_validate.utils.all_versions()})
    return [f"{major}.{minor}.0" for major, minor in minors[-4:]]


def documents() -> list[dict]:
    docs = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]
    assert docs, f"{MANIFEST} holds no document"
    return docs


def daemonset() -> dict:
    return next(d for d in documents() if d["kind"] == "DaemonSet")


@pytest.mark.parametrize("version", supported_versions())
def test_every_document_validates_strictly(version: str) -> None:
    for doc in documents():
        # strict: an unknown or misspelt field (e.g. a typo in securityContext) fails too
        kubernetes_validate.validate(doc, version, strict=True)


def test_a_misspelt_field_is_caught_by_the_validator() -> None:
    broken = daemonset()
    broken["spec"]["template"]["spec"]["hostPid"] = True  # wrong case: Kubernetes ignores it
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, supported_versions()[-1], strict=True)


def test_agent_sees_host_processes_with_two_capabilities_only() -> None:
    pod = daemonset()["spec"]["template"]["spec"]
    assert pod["hostPID"] is True
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    agent = next(c for c in pod["containers"] if c["name"] == "fleet-agent")
    ctx = agent["securityContext"]
    assert ctx["capabilities"]["drop"] == ["ALL"]
    assert sorted(ctx["capabilities"]["add"]) == ["DAC_READ_SEARCH", "SYS_PTRACE"]
    assert ctx["readOnlyRootFilesystem"] is True and not ctx.get("privileged")
    assert agent["resources"]["limits"]["memory"] and agent["resources"]["limits"]["cpu"]


def test_host_paths_are_read_only_except_the_agent_state() -> None:
    pod = daemonset()["spec"]["template"]["spec"]
    host_volumes = {v["name"] for v in pod["volumes"] if "hostPath" in v}
    for container in pod["containers"] + pod["initContainers"]:
        for mount in container.get("volumeMounts", []):
            if mount["name"] in host_volumes and mount["name"] != "state":
                assert mount.get("readOnly") is True, (container["name"], mount["name"])
    assert not any("sock" in v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v)


def test_no_kubernetes_api_rights_and_enrollment_from_a_secret() -> None:
    docs = documents()
    assert not [d for d in docs if d["kind"] in ("Role", "ClusterRole", "RoleBinding",
                                                 "ClusterRoleBinding")]
    account = next(d for d in docs if d["kind"] == "ServiceAccount")
    assert account["automountServiceAccountToken"] is False
    pod = daemonset()["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    secrets = {v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    assert "fleet-agent-enroll" in secrets
    enroll = next(c for c in pod["initContainers"] if c["name"] == "enroll")
    assert "--secret-file" in enroll["args"][0]  # never the secret itself in argv


def test_the_namespace_admits_a_node_agent_under_pod_security_admission() -> None:
    namespace = next(d for d in documents() if d["kind"] == "Namespace")
    labels = namespace["metadata"]["labels"]
    # without it, "baseline" enforcement refuses hostPID/hostPath pods and the DaemonSet
    # never starts a pod (no error on apply)
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
    pod_namespaces = {d["metadata"].get("namespace") for d in documents()
                      if d["kind"] in ("DaemonSet", "ServiceAccount")}
    assert pod_namespaces == {namespace["metadata"]["name"]}


def _run_enroll_script(tmp_path: Path, config_text: str | None) -> list[str]:
    """Run the enroll init container's shell with its paths under ``tmp_path`` and a stub
    ``fleet-agent`` that records its argv; returns the recorded argv (empty: not called)."""
    import os
    import subprocess

    pod = daemonset()["spec"]["template"]["spec"]
    enroll = next(c for c in pod["initContainers"] if c["name"] == "enroll")
    state = tmp_path / "state"
    state.mkdir()
    if config_text is not None:
        (state / "config.toml").write_text(config_text)
    script = enroll["args"][0].replace("/var/lib/fleet-agent", str(state)).replace(
        "/run/secrets/fleet-enroll", str(tmp_path / "secret"))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    stub = bindir / "fleet-agent"
    stub.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {tmp_path}/argv\n')
    stub.chmod(0o755)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}",
           "FLEET_SERVER_URL": "https://fleet.example.com", "NODE_NAME": "gpu-node-3"}
    subprocess.run(["/bin/sh", "-c", script], check=True, env=env, timeout=30)
    recorded = tmp_path / "argv"
    return recorded.read_text().splitlines() if recorded.exists() else []


def test_a_new_node_enrolls_with_the_secret_file_and_its_node_name(tmp_path: Path) -> None:
    argv = _run_enroll_script(tmp_path, None)
    assert argv[0] == "enroll"
    assert argv[argv.index("--server") + 1] == "https://fleet.example.com"
    assert argv[argv.index("--secret-file") + 1] == f"{tmp_path}/secret/secret"
    assert argv[argv.index("--label") + 1] == "k8s_node=gpu-node-3"
    assert argv[argv.index("--config") + 1] == f"{tmp_path}/state/config.toml"


def test_a_restarted_pod_keeps_the_nodes_token(tmp_path: Path) -> None:
    config = 'server_url = "https://fleet.example.com"\ntoken = "fa_node_token"\n'
    assert _run_enroll_script(tmp_path, config) == []  # no second enrollment


SECCOMP = MANIFEST.parents[1] / "seccomp" / "fleet-agent.json"


def test_the_agent_runs_under_a_profile_that_refuses_ptrace_and_handle_opens() -> None:
    """RuntimeDefault allows ptrace, process_vm_readv/writev and open_by_handle_at once
    SYS_PTRACE/DAC_READ_SEARCH are granted; the agent needs none of them (it reads
    /proc/<pid>/environ, a PTRACE_MODE_READ check, not the syscall)."""
    import json

    pod = daemonset()["spec"]["template"]["spec"]
    agent = next(c for c in pod["containers"] if c["name"] == "fleet-agent")
    profile = agent["securityContext"]["seccompProfile"]
    assert profile == {"type": "Localhost", "localhostProfile": SECCOMP.name}
    rules = json.loads(SECCOMP.read_text())["syscalls"]
    refused = {name for rule in rules if rule["action"] == "SCMP_ACT_ERRNO" and not rule.get("args")
               for name in rule["names"]}
    assert {"ptrace", "process_vm_readv", "process_vm_writev", "open_by_handle_at",
            "name_to_handle_at", "unshare", "setns", "bpf"} <= refused
    clone_flags = {a["value"] for rule in rules if rule["names"] == ["clone"]
                   for a in rule["args"]}
    assert 0x10000000 in clone_flags  # CLONE_NEWUSER


def test_the_agent_source_makes_none_of_the_refused_calls() -> None:
    import json
    import re

    rules = json.loads(SECCOMP.read_text())["syscalls"]
    refused = {name for rule in rules for name in rule["names"] if name != "clone"}
    source = "\n".join(p.read_text() for p in (MANIFEST.parents[2] / "fleet_agent").glob("*.py"))
    calls = {name for name in refused if re.search(rf"\b{name}\s*\(", source)}
    assert calls == set()
