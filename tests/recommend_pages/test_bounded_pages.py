"""The fleet upgrade view and the host recommendation page stay bounded on a big fleet
(harden item 4): identical servers are planned once, the fleet view is cached per KB version
and fleet, and a host with many servers is recommended a page at a time."""

from __future__ import annotations

import copy

import pytest

from fleet.models import Host

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.recommend_pages.urls")]

PUSH_ARGV = ["vllm", "serve", "cyankiwi/gemma-4-31B-it-AWQ-4bit", "--tensor-parallel-size", "2",
             "--max-model-len", "262144", "--max-num-seqs", "256"]




def _fleet(make_report, enrolled, post_report, hosts: int, per_host: int) -> None:
    for h in range(hosts):
        _, token = enrolled(machine_id=f"machine-{h}", hostname=f"node-{h}")
        report = make_report(host={"machine_id": f"machine-{h}", "hostname": f"node-{h}"})
        template = report["servers"][0]
        report["servers"] = []
        for i in range(per_host):
            server = copy.deepcopy(template)
            server.update(pid=1000 + i, argv=[*PUSH_ARGV, "--port", str(8000 + i)],
                          base_url=f"http://127.0.0.1:{8000 + i}")
            report["servers"].append(server)
        assert post_report(report, token=token).status_code == 202


def test_identical_servers_are_planned_once_per_version_and_counted_each(
        signed_in, make_report, enrolled, post_report, plan_calls):
    _fleet(make_report, enrolled, post_report, hosts=3, per_host=4)
    rows = {r["target"]: r for r in
            signed_in.get("/plan/fleet/?candidates=0.25.1,0.27.0").context["rows"]}
    assert rows["0.27.0"]["servers"] == 12 and rows["0.27.0"]["configurations"] == 1
    assert rows["0.27.0"]["risky"] + rows["0.27.0"]["blocked"] == 12
    assert len(plan_calls) == 2  # one configuration x two candidates, not 12 x 2


def test_the_fleet_view_is_cached_until_the_fleet_changes(signed_in, make_report, enrolled,
                                                          post_report, plan_calls):
    _fleet(make_report, enrolled, post_report, hosts=1, per_host=2)
    first = signed_in.get("/plan/fleet/?candidates=0.27.0").context["rows"]
    again = signed_in.get("/plan/fleet/?candidates=0.27.0").context["rows"]
    assert again == first and len(plan_calls) == 1
    _, token = enrolled(machine_id="machine-9", hostname="node-9")
    other = make_report(host={"machine_id": "machine-9", "hostname": "node-9"},
                        server={"argv": [*PUSH_ARGV, "--max-num-seqs", "64"]})
    assert post_report(other, token=token).status_code == 202
    rows = signed_in.get("/plan/fleet/?candidates=0.27.0").context["rows"]
    # two configurations now; only the new one is planned (plans are kept per configuration)
    assert rows[0]["servers"] == 3 and rows[0]["configurations"] == 2
    assert len(plan_calls) == 2


def test_a_host_with_many_servers_is_recommended_a_page_at_a_time(signed_in, make_report,
                                                                  enrolled, post_report):
    _fleet(make_report, enrolled, post_report, hosts=1, per_host=20)
    host = Host.objects.get()
    first = signed_in.get(f"/hosts/{host.code}/recommend/")
    assert len(first.context["items"]) == 16
    assert "Servers 1–16 of 20" in first.content.decode()
    second = signed_in.get(f"/hosts/{host.code}/recommend/?page=2")
    assert [s.identity for s, _ in second.context["items"]] == [
        f"port:{8000 + i}" for i in sorted(range(20), key=lambda i: f"port:{8000 + i}")][16:]
