"""Contract-shaped but hostile reports get a 422 with the field's path, never a 500, and the
largest report within the caps is stored and shown, through the API."""

from __future__ import annotations

import pytest

from fleet.models import Gpu, Host, Report, Server
from fleet_agent import schema

pytestmark = pytest.mark.django_db


def _gpu(report: dict, **fields) -> None:
    report["gpus"][0].update(fields)


def _server(report: dict, **fields) -> None:
    report["servers"][0].update(fields)


HOSTILE = [
    ("servers[0].pid", lambda r: _server(r, pid=2**31)),
    ("gpus[0].index", lambda r: _gpu(r, index=40000)),
    ("gpus[0].memory_total_bytes", lambda r: _gpu(r, memory_total_bytes=2**63)),
    ("servers[0].models[0].max_model_len",
     lambda r: r["servers"][0]["models"][0].update(max_model_len=2**31)),
    ("host.os", lambda r: r["host"].update(os="o" * 300)),
    ("host.kernel", lambda r: r["host"].update(kernel="k" * 300)),
    ("host.nvidia_driver_version", lambda r: r["host"].update(nvidia_driver_version="9" * 100)),
    ("servers[0].vllm_version", lambda r: _server(r, vllm_version="1" * 200)),
    ("servers[0].container_image", lambda r: _server(r, container_image="i" * 600)),
    ("servers[0].base_url", lambda r: _server(r, base_url="http://x/" + "u" * 600)),
    ("servers[0].chat_template.source",
     lambda r: r["servers"][0]["chat_template"].update(source="s" * 1200)),
    ("gpus[0].compute_capability", lambda r: _gpu(r, compute_capability="1" * 20 + ".0")),
    ("gpus[0].temperature_c", lambda r: _gpu(r, temperature_c=float("nan"))),
    ("gpus[0].power_draw_w", lambda r: _gpu(r, power_draw_w=float("inf"))),
    ("servers[0].argv[1]", lambda r: _server(r, argv=["vllm", "x\ud800"])),
    ("host.hostname", lambda r: r["host"].update(hostname="a\udfffb")),
    ("servers[0].env.K\ud800", lambda r: _server(r, env={"K\ud800": "v"})),
    ("gpus", lambda r: r["gpus"].append(dict(r["gpus"][0], index=1))),  # same uuid twice
    ("gpus", lambda r: r.update(gpus=[{"index": i % 100, "uuid": f"G{i}", "name": "x"}
                                      for i in range(20_000)])),
    ("servers", lambda r: r.update(servers=[{"pid": i + 1, "argv": ["v"]}
                                            for i in range(3_000)])),
    ("host.labels", lambda r: r["host"].update(labels={f"k{i}": "v" for i in range(80_000)})),
    ("servers[0].models", lambda r: _server(r, models=[{"id": f"m{i}"} for i in range(5000)])),
    ("servers[0].argv", lambda r: _server(r, argv=["x"] * (schema.MAX_ARGV + 1))),
    ("servers[0].env", lambda r: _server(r, env={f"E{i}": "v" for i in range(5000)})),
    ("servers[0].errors", lambda r: _server(r, errors=["e"] * 1000)),
    ("servers[0].metrics.text", lambda r: _server(r, metrics={
        "scraped_at": r["collected_at"],
        "text": 'vllm:num_requests_running{a="' + '\\"' * 1_000_000 + '"} 1\n'})),
]


@pytest.mark.parametrize("path,mutate", HOSTILE, ids=[f"{p}#{i}" for i, (p, _) in
                                                      enumerate(HOSTILE)])
def test_a_hostile_value_is_refused_with_its_path(post_report, make_report, enrolled, path,
                                                  mutate) -> None:
    _, token = enrolled()
    report = make_report()
    mutate(report)
    response = post_report(report, token=token)
    assert response.status_code == 422, response.content[:300]
    assert path in [d["path"] for d in response.json()["details"]]
    assert not Report.objects.exists()


def test_the_largest_report_within_the_caps_is_stored_and_its_page_is_bounded(
        post_report, make_report, enrolled, client, django_user_model) -> None:
    _, token = enrolled()
    report = make_report()
    report["gpus"] = [dict(report["gpus"][0], index=i, uuid=f"GPU-{i}")
                      for i in range(schema.MAX_GPUS)]
    report["servers"] = [dict(report["servers"][0], pid=100 + i, base_url=None,
                              argv=["vllm", "serve", "m", "--port", str(9000 + i)])
                         for i in range(schema.MAX_SERVERS)]
    report["host"]["labels"] = {f"k{i}": "v" for i in range(schema.MAX_LABELS)}
    assert post_report(report, token=token).status_code == 202
    assert Gpu.objects.count() == schema.MAX_GPUS
    assert Server.objects.count() == schema.MAX_SERVERS
    report = make_report()  # the next report: every GPU but one is gone
    assert post_report(report, token=token).status_code == 202
    assert Gpu.objects.filter(is_present=True).count() == 1

    client.force_login(django_user_model.objects.create_user("v", password="pw"))
    page = client.get(f"/hosts/{Host.objects.get().code}/")
    assert page.status_code == 200
    assert "more servers" in page.content.decode()
    overview = client.get("/")
    assert overview.status_code == 200 and "+48 labels" in overview.content.decode()
