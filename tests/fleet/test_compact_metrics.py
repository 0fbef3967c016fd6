"""The compact /metrics form through the API and the worker, in both directions: an old
agent's text-only report and a new agent's compact-only report of the same scrape give the
same stored sample and the same rule context; a bad compact block is a 422 naming the field."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from audit.kb.context import build_contexts
from fleet.models import MetricSample, Report
from fleet_agent.metrics_compact import compact
from tests.conftest import iso

CAPTURES = Path(__file__).resolve().parents[2] / "demo" / "data" / "cases" / "metrics"
CAPTURE = CAPTURES / "vllm-benchmarking-fixture_v0.25.1_opt-125m-tp2-loaded.prom"
SAMPLE_FIELDS = ("window_kind", "kv_cache_usage", "requests_running", "requests_waiting",
                 "generation_tps", "prompt_tps", "ttft_p50_s", "ttft_p99_s", "itl_p99_s",
                 "preemptions", "prefix_cache_hit_rate", "extra")


def _grown(text: str, factor: float) -> str:
    """The capture later in the same process: every counter and bucket ``factor`` times
    larger (gauges too; enough to give a non-empty window)."""
    out = []
    for line in text.splitlines():
        if line.startswith("vllm:") and " " in line:
            head, value = line.rsplit(" ", 1)
            with contextlib.suppress(ValueError):
                line = f"{head} {float(value) * factor}"
        out.append(line)
    return "\n".join(out) + "\n"


def _metrics(text: str, at: datetime, form: str) -> dict:
    block = {"format": "prometheus-text", "scraped_at": iso(at)}
    if form in ("text", "both"):
        block["text"] = text
    if form in ("compact", "both"):
        block["compact"] = compact(text)
        block.setdefault("text", "")
    return block


def _post_pair(post_report, make_report, token: str, form: str, machine: str) -> None:
    text = CAPTURE.read_text()
    start = datetime.now(UTC) - timedelta(minutes=5)
    for step, body in enumerate((text, _grown(text, 1.5))):
        at = start + timedelta(seconds=30 * step)
        report = make_report(server={"metrics": _metrics(body, at, form)},
                             host={"machine_id": machine, "hostname": machine},
                             collected_at=iso(at))
        assert post_report(report, token=token).status_code == 202


def _samples(machine: str) -> list[dict]:
    rows = MetricSample.objects.filter(server__host__machine_id=machine).order_by("ts")
    return [{f: getattr(row, f) for f in SAMPLE_FIELDS} for row in rows]


@pytest.mark.django_db
def test_an_old_agents_text_and_a_new_agents_compact_form_give_the_same_samples(
        post_report, make_report, enrolled):
    _, old_token = enrolled("machine-old", "machine-old")
    _, new_token = enrolled("machine-new", "machine-new")
    _post_pair(post_report, make_report, old_token, "text", "machine-old")
    _post_pair(post_report, make_report, new_token, "compact", "machine-new")
    old, new = _samples("machine-old"), _samples("machine-new")
    assert [s["window_kind"] for s in new] == ["lifetime", "delta"]
    assert new[1]["generation_tps"] and new[1]["generation_tps"] > 0
    assert new == old


@pytest.mark.django_db
def test_rules_see_the_same_metrics_block_from_either_form(post_report, make_report, enrolled):
    _, old_token = enrolled("machine-old", "machine-old")
    _, new_token = enrolled("machine-new", "machine-new")
    _post_pair(post_report, make_report, old_token, "text", "machine-old")
    _post_pair(post_report, make_report, new_token, "compact", "machine-new")
    blocks = {}
    for machine in ("machine-old", "machine-new"):
        first, second = [r.raw for r in Report.objects.filter(
            host__machine_id=machine).order_by("collected_at")]
        blocks[machine] = build_contexts(second, [first])[0]["metrics"]
    assert blocks["machine-new"]["available"] is True
    assert blocks["machine-new"]["generation_tps"] > 0
    assert blocks["machine-new"] == blocks["machine-old"]


@pytest.mark.django_db
def test_with_both_forms_the_worker_follows_the_compact_numbers(
        post_report, make_report, enrolled):
    _, token = enrolled()
    text = CAPTURE.read_text()
    block = _metrics(text, datetime.now(UTC) - timedelta(seconds=5), "both")
    block["compact"]["samples"]["vllm:num_requests_running"] = [[{"engine": "0"}, 41.0]]
    assert post_report(make_report(server={"metrics": block}), token=token).status_code == 202
    assert MetricSample.objects.get().requests_running == 41.0


@pytest.mark.django_db
def test_the_answer_says_the_dashboard_reads_the_compact_form(post_report, make_report,
                                                               enrolled):
    _, token = enrolled()
    assert post_report(make_report(), token=token).json()["metrics_compact"] is True


@pytest.mark.django_db
@pytest.mark.parametrize(("compact_block", "path"), [
    ({"histograms": {"vllm:e2e_request_latency_seconds": [{"le": ["1.0", "+Inf"],
                                                            "counts": [1.0]}]}},
     "servers[0].metrics.compact.histograms.vllm:e2e_request_latency_seconds[0].counts"),
    ({"samples": {"vllm:num_requests_running": [[{"engine": "x" * 300}, 1.0]]}},
     "servers[0].metrics.compact.samples.vllm:num_requests_running[0][0].engine"),
    ({"samples": {"vllm:num_requests_running": [["not labels", 1.0]]}},
     "servers[0].metrics.compact.samples.vllm:num_requests_running[0][0]"),
    ({"names_sha256": "nope"}, "servers[0].metrics.compact.names_sha256"),
])
def test_a_bad_compact_block_is_refused_with_its_path(post_report, make_report, enrolled,
                                                      compact_block, path):
    _, token = enrolled()
    block = {"format": "prometheus-text", "scraped_at": iso(datetime.now(UTC)),
             "compact": compact_block}
    response = post_report(make_report(server={"metrics": block}), token=token)
    assert response.status_code == 422
    assert path in [d["path"] for d in response.json()["details"]]
    assert Report.objects.count() == 0


def _compact_only(make_report, at: datetime, machine: str = "machine-1") -> dict:
    block = _metrics(CAPTURE.read_text(), at, "compact")
    return make_report(server={"metrics": block}, collected_at=iso(at),
                       host={"machine_id": machine})


def test_the_dashboard_asks_each_host_for_its_text_once_per_period(settings, make_report):
    from fleet.metrics_text import text_due
    from fleet_agent.schema import parse_report

    settings.FLEET_METRICS_TEXT_EVERY_S = 3600
    start = datetime(2026, 12, 1, tzinfo=UTC)
    for machine in ("machine-1", "machine-2", "machine-3"):
        asked = [at for at in (start + timedelta(seconds=30 * k) for k in range(240))
                 if text_due(parse_report(_compact_only(make_report, at, machine)))]
        assert len(asked) == 2, machine  # two hours of 30 s reports: once an hour
        assert asked[1] - asked[0] == timedelta(hours=1)
    settings.FLEET_METRICS_TEXT_EVERY_S = 0
    assert not any(text_due(parse_report(_compact_only(make_report, start + timedelta(
        seconds=30 * k)))) for k in range(240))


@pytest.mark.django_db
def test_the_202_carries_the_text_request_when_due(post_report, make_report, enrolled,
                                                    settings):
    from fleet.metrics_text import text_due
    from fleet_agent.schema import parse_report

    settings.FLEET_METRICS_TEXT_EVERY_S = 600
    _, token = enrolled()
    now = datetime.now(UTC) - timedelta(minutes=20)
    times = [now + timedelta(seconds=30 * k) for k in range(20)]
    due = next(at for at in times if text_due(parse_report(_compact_only(make_report, at))))
    asked = post_report(_compact_only(make_report, due), token=token).json()
    later = post_report(_compact_only(make_report, due + timedelta(seconds=30)),
                        token=token).json()
    assert asked["metrics_text"] == ["*"]
    assert "metrics_text" not in later
