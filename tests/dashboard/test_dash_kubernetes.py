"""Servers in Kubernetes pods (issue 18): stored from the report, shown and filtered on the
overview by namespace and pod, named on the host page."""

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
