"""A vLLM server in a Kubernetes pod: found through the node's /proc like any other, its pod
named from the cgroup path, the container runtime's record and the environment."""

from __future__ import annotations

import json
import uuid

import pytest
from fa_fakenode import FakeNode

from fleet_agent import discovery, kube, procfs
from fleet_agent.schema import ReportError, parse_report

CID = "3f" * 32
UID = "5b1f0a9e-6c2d-4e8f-9a1b-2c3d4e5f6a7b"
ARGV = ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "m/x",
        "--port", "8000"]


def _found(node: FakeNode) -> list[discovery.ServerProcess]:
    table = procfs.scan(node.root)
    servers = discovery.find_servers(table)
    for server in servers:
        discovery.inspect(table, server)
    return servers


@pytest.mark.parametrize("runtime,driver,qos", [
    ("containerd", "systemd", "burstable"), ("containerd", "cgroupfs", "besteffort"),
    ("crio", "systemd", "besteffort"), ("crio", "cgroupfs", "burstable")])
def test_a_pod_server_carries_its_namespace_pod_container_uid_and_image(
        node: FakeNode, runtime: str, driver: str, qos: str) -> None:
    cgroup = node.kube_container(CID, UID, namespace="llm-prod", pod="vllm-qwen-7d9f-x2k4",
                                 container="vllm", image="vllm/vllm-openai:v0.11.0",
                                 runtime=runtime, driver=driver, qos=qos)
    pids = node.add_vllm(ARGV, cgroup=cgroup, env={"HOSTNAME": "vllm-qwen-7d9f-x2k4"})
    node.pod_network(pids.server, "10.244.3.17")
    (server,) = _found(node)
    assert server.kubernetes == {"namespace": "llm-prod", "pod": "vllm-qwen-7d9f-x2k4",
                                 "container": "vllm", "pod_uid": UID}
    assert server.container_image == "vllm/vllm-openai:v0.11.0"
    # the pod's own loopback is not the agent's: the server is reached on the pod's IP
    assert server.base_url == "http://10.244.3.17:8000"


def test_cgroup_v1_lines_and_a_guaranteed_pod_are_recognised() -> None:
    v1 = (f"12:pids:/kubepods/pod{UID}/{CID}\n"
          f"11:memory:/kubepods/pod{UID}/{CID}\n1:name=systemd:/kubepods/pod{UID}/{CID}\n")
    assert kube.pod_from_cgroup(v1) == (UID, CID)
    docker = (f"0::/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/"
              f"docker-{CID}.scope\n")
    assert kube.pod_from_cgroup(docker) == (UID, CID)
    assert kube.pod_from_cgroup(f"0::/system.slice/docker-{CID}.scope\n") == (None, None)


def test_without_the_runtime_record_the_downward_api_env_names_the_pod(node: FakeNode) -> None:
    cgroup = f"0::/kubepods/burstable/pod{UID}/{CID}\n"  # runtime state not mounted
    node.add_vllm(ARGV, cgroup=cgroup, env={"POD_NAMESPACE": "serving", "POD_NAME": "qwen-0",
                                            "HOSTNAME": "ignored-when-pod-name-is-set",
                                            "KUBERNETES_SERVICE_HOST": "10.96.0.1"})
    (server,) = _found(node)
    assert server.kubernetes == {"namespace": "serving", "pod": "qwen-0", "container": None,
                                 "pod_uid": UID}
    assert server.base_url == "http://127.0.0.1:8000"  # no pod network read: loopback


def test_a_host_process_is_not_a_pod(node: FakeNode) -> None:
    node.add_vllm(ARGV, env={"HOSTNAME": "gpu-node-7"})
    (server,) = _found(node)
    assert server.kubernetes is None


def test_hostile_names_from_the_pod_are_dropped_not_sent(node: FakeNode) -> None:
    cgroup = f"0::/kubepods/burstable/pod{UID}/{CID}\n"
    node.write_file(None, f"/run/containerd/io.containerd.runtime.v2.task/k8s.io/{CID}/"
                    "config.json", json.dumps({"annotations": {
                        "io.kubernetes.cri.sandbox-namespace": "Bad Namespace!",
                        "io.kubernetes.cri.sandbox-name": "x" * 300,
                        "io.kubernetes.cri.container-name": ["not", "a", "string"],
                        "io.kubernetes.cri.image-name": "img\n$(reboot)"}}))
    node.add_vllm(ARGV, cgroup=cgroup, env={"POD_NAMESPACE": "../../etc"})
    (server,) = _found(node)
    assert server.kubernetes == {"namespace": None, "pod": None, "container": None,
                                 "pod_uid": UID}
    assert server.container_image is None


def test_the_report_carries_the_pod_and_the_contract_checks_it(node: FakeNode,
                                                                 run_collect) -> None:
    cgroup = node.kube_container(CID, UID, namespace="llm-prod", pod="vllm-0",
                                 container="vllm", image="vllm/vllm-openai:v0.11.0")
    node.add_vllm(ARGV, cgroup=cgroup)
    (entry,) = run_collect(node, probe_http=False).servers
    assert entry.kubernetes.namespace == "llm-prod" and entry.kubernetes.pod == "vllm-0"
    assert entry.kubernetes.pod_uid == uuid.UUID(UID)
    wire = {"schema_version": 1, "report_id": str(uuid.uuid4()),
            "collected_at": "2026-12-01T07:00:00Z", "agent": {"version": "x", "interval_s": 30},
            "host": {"hostname": "n", "machine_id": "m"},
            "servers": [{"pid": 5, "argv": ["vllm"], "kubernetes": {"namespace": "A_B"}}]}
    with pytest.raises(ReportError) as err:
        parse_report(wire)
    assert err.value.details[0]["path"] == "servers[0].kubernetes.namespace"
    wire["servers"][0].pop("kubernetes")  # older agents send none: still valid
    assert parse_report(wire).servers[0].kubernetes is None
