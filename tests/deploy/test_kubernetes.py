"""The agent's DaemonSet validates against the Kubernetes versions in support and keeps the
privileges the agent needs and no others (``deploy/kubernetes/fleet-agent-daemonset.yaml``).

Schemas come with ``kubernetes-validate`` (no network); the supported versions are the four
newest minors it ships (Kubernetes supports the three newest minors, one more is kept for
clusters mid-upgrade).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

kubernetes_validate = pytest.importorskip("kubernetes_validate")  # the `test` extra has it

MANIFEST = Path(__file__).resolve().parents[2] / "deploy/kubernetes/fleet-agent-daemonset.yaml"


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
