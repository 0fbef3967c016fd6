"""The stacks fleets run on the dashboard: servers in Kubernetes pods (stored,
shown and filtered on the overview by namespace and pod, named on the host page) and AMD
hosts (gfx target stored and shown, ROCm rules applied)."""

from __future__ import annotations

import re

import pytest

from fleet.models import Server

POD = {"namespace": "llm-prod", "pod": "vllm-qwen-0", "container": "vllm",
       "pod_uid": "5b1f0a9e-6c2d-4e8f-9a1b-2c3d4e5f6a7b"}


@pytest.fixture
def two_hosts(enrolled, post_report, make_report):
    pod_host, pod_token = enrolled("machine-k8s", "k8s-gpu-1")
    bare_host, bare_token = enrolled("machine-bare", "bare-gpu-1")
    kube = make_report(host={"hostname": "k8s-gpu-1", "machine_id": "machine-k8s"},
                       server={"kubernetes": POD, "container_image": "vllm/vllm-openai:v0.11.0"})
    bare = make_report(host={"hostname": "bare-gpu-1", "machine_id": "machine-bare"})
    assert post_report(kube, pod_token).status_code == 202
    assert post_report(bare, bare_token).status_code == 202
    return pod_host, bare_host


def test_the_pod_is_stored_and_the_overview_filters_by_namespace_and_pod(
        client, two_hosts, role_user):
    pod_host, bare_host = two_hosts
    assert Server.objects.get(host=pod_host).kubernetes == POD
    assert Server.objects.get(host=bare_host).kubernetes is None
    client.force_login(role_user("viewer"))

    def shown(**params: str) -> set[str]:
        page = client.get("/", params).content.decode()
        return set(re.findall(r'<tr data-host="([^"]+)"', page))

    assert shown() == {"k8s-gpu-1", "bare-gpu-1"}
    assert shown(namespace="llm-prod") == {"k8s-gpu-1"}
    assert shown(namespace="llm") == set()  # a namespace matches exactly
    assert shown(pod="qwen") == {"k8s-gpu-1"}
    assert "pod llm-prod/vllm-qwen-0" in client.get("/").content.decode()


def test_the_host_page_names_the_pod_and_its_container(client, two_hosts, role_user):
    client.force_login(role_user("viewer"))
    page = client.get(f"/hosts/{two_hosts[0].code}/").content.decode()
    assert "llm-prod/vllm-qwen-0" in page and "<code>vllm</code>" in page


def test_a_bad_pod_name_is_a_4xx_naming_the_field(enrolled, post_report, make_report):
    _, token = enrolled()
    report = make_report(server={"kubernetes": {**POD, "pod": "<script>"}})
    answer = post_report(report, token)
    assert answer.status_code in (400, 422)
    assert "servers[0].kubernetes.pod" in answer.content.decode()


def test_an_amd_host_shows_its_gfx_target_and_gets_the_rocm_rules(
        client, enrolled, post_report, make_report, role_user):
    """An AMD node's report (GPUs read through AMD SMI) is stored with its gfx
    target and judged by the ROCm rules of the knowledge base."""
    from audit.evaluation import evaluate_report
    from audit.models import Finding
    from fleet.models import Gpu

    host, token = enrolled("machine-amd", "mi300-node-1")
    gpu = {"index": 0, "uuid": "9cff73b4-0000-1000-80f2-a1b2c3d4e5f6",
           "name": "AMD Instinct MI300X", "vendor": "amd", "gfx_arch": "gfx942",
           "memory_total_bytes": 205_822_885_888, "compute_capability": None}
    report = make_report(host={"hostname": "mi300-node-1", "machine_id": "machine-amd",
                               "nvidia_driver_version": None, "cuda_driver_version": None,
                               "amd_driver_version": "6.10.5"},
                         gpus=[gpu], server={"gpu_uuids": [gpu["uuid"]], "env": {}})
    assert post_report(report, token).status_code == 202
    evaluate_report(report["report_id"])
    stored = Gpu.objects.get(host=host)
    assert (stored.gfx_arch, stored.compute_capability, stored.driver_version) == (
        "gfx942", "", "6.10.5")
    assert Finding.objects.active().filter(host=host, rule_id="upx-rocm-cdna-aiter-off").exists()
    client.force_login(role_user("viewer"))
    page = client.get(f"/hosts/{host.code}/").content.decode()
    assert "gfx942" in page and "cc gfx942" not in page
    assert "<dt>AMD driver</dt><dd>amdgpu 6.10.5</dd>" in page
    assert "Driver / CUDA" not in page  # no NVIDIA driver on this node
