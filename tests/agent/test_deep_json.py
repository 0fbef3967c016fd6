"""Deeply nested JSON in argv/env: redaction never raises,
the agent's cycle still reports the host, and the value goes out whole as REDACTED."""

from __future__ import annotations

import json

from fa_fakenode import FakeNode

from fleet_agent import schema, trim
from fleet_agent.redact import redact_argv, redact_env, redact_text
from fleet_agent.report_redaction import redact_report
from fleet_agent.schema import REDACTED

DEEP = "[" * 5000 + "]" * 5000
DEEP_OBJECT = '{"a": ' * 900 + '"sk-live-deep-secret"' + "}" * 900


def test_the_cycle_survives_a_5000_deep_argv_word_and_env_value(node: FakeNode,
                                                                run_collect) -> None:
    pids = node.add_vllm(["vllm", "serve", "m/x", "--speculative-config", DEEP, DEEP_OBJECT],
                         env={"VLLM_EXTRA": DEEP, "HF_TOKEN": "hf_" + "a" * 34}, listen=())
    report = run_collect(node, probe_http=False)
    entry = next(s for s in report.servers if s.pid == pids.server)
    assert entry.argv[3:] == ["--speculative-config", REDACTED, REDACTED]
    assert entry.env["VLLM_EXTRA"] == REDACTED
    schema.parse_report(report.model_dump(mode="json"))  # the dashboard accepts it


def test_shallow_json_is_still_redacted_key_by_key() -> None:
    word = json.dumps({"model": "m", "draft": {"api_key": "sk-abc123", "n": [[1, 2]]}})
    out = json.loads(redact_argv(["--speculative-config", word])[1])
    assert out == {"model": "m", "draft": {"api_key": REDACTED, "n": [[1, 2]]}}
    assert redact_text('{"a": "[[[[" }') == '{"a": "[[[[" }'  # brackets in strings don't count


def test_the_server_side_redaction_of_a_deep_report_never_raises() -> None:
    raw = {"servers": [{"argv": ["vllm", DEEP], "env": {"X": DEEP_OBJECT},
                        "errors": [DEEP], "deep": json.loads("[" * 900 + "]" * 900)}]}
    out = redact_report(raw)
    assert out["servers"][0]["argv"][1] == REDACTED and out["servers"][0]["env"]["X"] == REDACTED
    assert redact_env({"A": "[" * 100000}) == {"A": REDACTED}


def test_conform_cuts_nesting_past_the_dashboards_depth() -> None:
    nested: list = []
    inner = nested
    for _ in range(3000):
        inner.append([])
        inner = inner[0]
    data = {"host": {"hostname": "h", "machine_id": "m"}, "gpus": [], "gpu_processes": [],
            "servers": [{"pid": 1, "argv": [], "env": {}, "extra": nested}]}
    out = trim.conform(data)
    assert schema.json_problems(out) == []
