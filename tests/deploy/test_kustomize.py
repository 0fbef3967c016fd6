"""The Kubernetes packaging (deploy/kubernetes/): every base and overlay renders with
``kubectl kustomize`` and each object validates strictly against the Kubernetes versions in
support (``kubernetes-validate``); the overlays do what their names say (AMD mounts, the
nvidia RuntimeClass, Prometheus Operator objects), GPU nodes are selected with or without
feature discovery, and the dashboard waits for its migrations."""

from __future__ import annotations

import shutil
import subprocess
from functools import cache
from pathlib import Path

import pytest
import yaml

from tests.deploy.test_kubernetes import kubernetes_validate, supported_versions

ROOT = Path(__file__).resolve().parents[2]
KUBE = ROOT / "deploy/kubernetes"
RENDERED = ["agent", "dashboard", "overlays/production", "overlays/amd",
            "overlays/nvidia-runtime-class"]
#: Prometheus Operator kinds: their schemas are CRDs, not in kubernetes-validate.
OPERATOR_KINDS = {"ServiceMonitor", "PrometheusRule"}


@cache
def render(path: str) -> list[dict]:
    kubectl = shutil.which("kubectl")
    if not kubectl:
        pytest.fail("kubectl is not on PATH (it renders the kustomizations: "
                    "https://kubernetes.io/docs/tasks/tools/)")
    done = subprocess.run([kubectl, "kustomize", str(KUBE / path)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def find(docs: list[dict], kind: str, name: str | None = None) -> dict:
    return next(d for d in docs if d["kind"] == kind
                and (name is None or d["metadata"]["name"] == name))


def agent_pod(path: str) -> dict:
    return find(render(path), "DaemonSet", "fleet-agent")["spec"]["template"]["spec"]


@pytest.mark.parametrize("path", RENDERED)
def test_each_kustomization_renders_and_validates_strictly(path: str) -> None:
    docs = render(path)
    assert docs
    versions = supported_versions()
    for doc in docs:
        if doc["kind"] in OPERATOR_KINDS:
            continue
        for version in (versions[0], versions[-1]):
            kubernetes_validate.validate(doc, version, strict=True)


def test_the_production_overlay_holds_dashboard_agent_and_monitoring() -> None:
    kinds = {(d["kind"], d["metadata"]["name"]) for d in render("overlays/production")}
    assert {("Deployment", "fleet-audit-web"), ("Deployment", "fleet-audit-worker"),
            ("Deployment", "fleet-audit-beat"), ("Job", "fleet-audit-migrate"),
            ("DaemonSet", "fleet-agent"), ("ServiceMonitor", "fleet-audit"),
            ("PrometheusRule", "fleet-audit")} <= kinds


def test_the_prometheus_rule_holds_the_shipped_rules_and_the_monitor_finds_the_web() -> None:
    docs = render("overlays/production")
    rules = yaml.safe_load((ROOT / "deploy/prometheus/fleet-audit-rules.yaml").read_text())
    assert find(docs, "PrometheusRule")["spec"]["groups"] == rules["groups"]
    monitor = find(docs, "ServiceMonitor")
    service = find(docs, "Service", "fleet-audit-web")
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert monitor["metadata"]["namespace"] == service["metadata"]["namespace"]
    [endpoint] = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert endpoint["path"] == "/metrics"
    assert endpoint["authorization"]["credentials"]["key"] == "PROMETHEUS_TOKEN"


def test_the_dashboard_waits_for_one_migrations_job() -> None:
    docs = render("dashboard")
    job = find(docs, "Job", "fleet-audit-migrate")
    assert job["spec"]["template"]["spec"]["containers"][0]["command"][-2:] == \
        ["migrate", "--noinput"]
    for name in ("fleet-audit-web", "fleet-audit-worker", "fleet-audit-beat"):
        pod = find(docs, "Deployment", name)["spec"]["template"]["spec"]
        [wait] = pod["initContainers"]
        assert "migrate --check" in " ".join(wait["command"])
        for container in pod["containers"] + pod["initContainers"]:
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False
            assert context["readOnlyRootFilesystem"] is True
    assert find(docs, "Deployment", "fleet-audit-beat")["spec"]["replicas"] == 1
    namespace = find(docs, "Namespace")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == \
        "restricted"


def _schedulable(pod: dict, labels: dict[str, str]) -> bool:
    """Whether a node with ``labels`` matches the pod's required node affinity (the In and
    Exists operators the manifests use; terms are ORed, expressions ANDed)."""
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    def matches(expr: dict) -> bool:
        if expr["operator"] == "Exists":
            return expr["key"] in labels
        assert expr["operator"] == "In", expr
        return labels.get(expr["key"]) in expr["values"]
    return any(all(matches(e) for e in term["matchExpressions"])
               for term in terms["nodeSelectorTerms"])


@pytest.mark.parametrize("labels", [
    {"nvidia.com/gpu.present": "true"},                        # GPU Operator / GFD
    {"feature.node.kubernetes.io/pci-10de.present": "true"},   # NFD alone, NVIDIA
    {"feature.node.kubernetes.io/pci-1002.present": "true"},   # NFD alone, AMD
    {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"},  # stock GKE GPU pool
    {"k8s.amazonaws.com/accelerator": "nvidia-tesla-a100"},    # EKS GPU node group
    {"accelerator": "nvidia"},                                 # AKS GPU pool
    {"fleet-audit.io/gpu": "true"},                            # labelled by hand
])
def test_gpu_nodes_are_selected_with_or_without_feature_discovery(labels) -> None:
    assert _schedulable(agent_pod("agent"), labels)


def test_cpu_nodes_get_no_agent() -> None:
    assert not _schedulable(agent_pod("agent"), {"kubernetes.io/os": "linux",
                                                 "node.kubernetes.io/instance-type": "m5"})


def test_the_amd_overlay_mounts_rocm_and_the_gpu_devices() -> None:
    pod = agent_pod("overlays/amd")
    agent = next(c for c in pod["containers"] if c["name"] == "fleet-agent")
    mounts = {m["mountPath"]: m for m in agent["volumeMounts"]}
    assert mounts["/opt/rocm"]["readOnly"] is True
    assert {"/dev/kfd", "/dev/dri"} <= set(mounts)
    paths = {v["hostPath"]["path"]: v["hostPath"]["type"] for v in pod["volumes"]
             if "hostPath" in v}
    assert paths["/dev/kfd"] == "CharDevice" and paths["/opt/rocm"] == "Directory"
    assert {"name": "ROCM_PATH", "value": "/opt/rocm"} in agent["env"]
    base = next(c for c in agent_pod("agent")["containers"] if c["name"] == "fleet-agent")
    assert not base["securityContext"].get("privileged")  # only the AMD overlay needs it
    assert "/dev/kfd" not in {m["mountPath"] for m in base["volumeMounts"]}


def test_the_runtime_class_overlay_sets_it_and_the_base_does_not() -> None:
    assert agent_pod("overlays/nvidia-runtime-class")["runtimeClassName"] == "nvidia"
    assert "runtimeClassName" not in agent_pod("agent")


def test_the_agent_priority_class_comes_with_the_quota_gke_requires() -> None:
    docs = render("agent")
    pod = agent_pod("agent")
    quota = find(docs, "ResourceQuota")
    assert quota["metadata"]["namespace"] == find(docs, "DaemonSet")["metadata"]["namespace"]
    [scope] = quota["spec"]["scopeSelector"]["matchExpressions"]
    assert scope["scopeName"] == "PriorityClass"
    assert pod["priorityClassName"] in scope["values"]
