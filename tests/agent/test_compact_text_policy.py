"""The agent's compact /metrics form and when the raw text goes with it."""

from __future__ import annotations

import json

from fleet_agent import deliver
from fleet_agent.collect import CycleInput, collect
from fleet_agent.config import AgentConfig, ConfigError, from_dict
from fleet_agent.metrics_compact import TextPolicy, compact, parse_line

BODY = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m \\"quoted\\", a\\\\b"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} NaN
vllm:prompt_tokens_total{engine="0",model_name="m"} 1200.0 1700000000000
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 4.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 9.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 2.5
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 9.0
vllm:some_unread_histogram_bucket{le="1.0"} 7.0
python_gc_objects_collected_total{generation="0"} 123.0
vllm:broken{engine="0" 1.0
"""


def test_sample_lines_parse_with_escapes_and_timestamps():
    assert parse_line('a{x="q\\"uote",y="back\\\\slash",z="new\\nline"} 1.5 123') == (
        "a", {"x": 'q"uote', "y": "back\\slash", "z": "new\nline"}, 1.5)
    assert parse_line("plain 2") == ("plain", {}, 2.0)
    assert parse_line('bad{x="unterminated} 1') is None
    assert parse_line("no_value") is None


def test_only_the_families_the_dashboard_reads_go_as_numbers():
    block = compact(BODY)
    assert block["samples"] == {
        "vllm:num_requests_running": [[{"engine": "0", "model_name": 'm "quoted", a\\b'}, 3.0]],
        "vllm:prompt_tokens_total": [[{"engine": "0", "model_name": "m"}, 1200.0]]}
    assert block["histograms"] == {"vllm:time_to_first_token_seconds": [
        {"labels": {"engine": "0", "model_name": "m"}, "le": ["0.1", "+Inf"],
         "counts": [4.0, 9.0], "sum": 2.5, "count": 9.0}]}
    assert block["vllm_engine_label"] is True
    json.dumps(block, allow_nan=False)  # NaN dropped: JSON cannot carry it


def test_the_names_digest_moves_with_the_set_of_names_not_with_values():
    digest = compact(BODY)["names_sha256"]
    assert compact(BODY.replace("1200.0", "1300.0"))["names_sha256"] == digest
    assert compact(BODY + "vllm:new_family 1\n")["names_sha256"] != digest


def test_text_goes_every_cycle_until_the_dashboard_reads_the_compact_form():
    policy = TextPolicy(every=3)
    assert [policy.send_text("port:8000", "d") for _ in range(3)] == [True, True, True]


def test_then_text_goes_on_first_sight_name_change_schedule_and_request():
    policy = TextPolicy(every=3, dashboard_reads_compact=True)
    sent = [policy.send_text("port:8000", "d") for _ in range(4)]
    assert sent == [True, False, False, True]  # first sight, then every 3rd cycle
    assert policy.send_text("port:8000", "other") is True  # the set of names changed
    assert policy.send_text("port:8000", "other") is False
    policy.request(["port:8000"])
    assert policy.send_text("port:8000", "other") is True
    assert policy.send_text("port:8000", "other") is False
    policy.request(["*"])
    assert policy.send_text("port:8000", "other") is True
    never = TextPolicy(every=0, dashboard_reads_compact=True)
    assert [never.send_text("port:9", "d") for _ in range(200)].count(True) == 1


def test_a_cycle_sends_compact_numbers_and_leaves_the_text_out_when_not_due(gemma_node):
    node, _servers = gemma_node
    policy = TextPolicy(every=120, dashboard_reads_compact=True)
    config = AgentConfig()

    def cycle():
        report = collect(CycleInput(config=config, root=node.root, gpu_source="none",
                                    text_policy=policy))
        return [s.metrics for s in report.servers if s.metrics is not None]

    first, second = cycle(), cycle()
    assert first and all(m.text and m.compact and m.compact.samples for m in first)
    assert len(second) == len(first)
    assert all(m.text == "" and m.compact and m.compact.samples for m in second)


def test_report_answers_are_read_for_text_requests_and_compact_support():
    answer = json.dumps({"report_id": "x", "metrics_compact": True,
                         "metrics_text": ["port:8000", 7, "*"]})
    assert deliver.metrics_text_requests(answer) == ["port:8000", "*"]
    assert deliver.reads_compact(answer) is True
    for old in ('{"report_id": "x", "duplicate": false}', "not json", "[1]"):
        assert deliver.metrics_text_requests(old) == []
        assert deliver.reads_compact(old) is False


def test_the_text_schedule_is_configurable_and_checked():
    assert from_dict({"metrics_text_every": 0}).metrics_text_every == 0
    assert AgentConfig().metrics_text_every == 120
    try:
        from_dict({"metrics_text_every": -1})
    except ConfigError as exc:
        assert "metrics_text_every" in str(exc)
    else:
        raise AssertionError("a negative schedule was accepted")
