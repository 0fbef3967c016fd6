"""A compact /metrics block is redacted by reading its strings without writing its numbers
out (fleet_agent.report_redaction): the result must be the general way's, secrets included,
for any block an agent may send, well shaped or not."""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from fleet_agent.report_redaction import _strings, redact_report

_SECRETS = ["hf_" + "Q" * 34, "https://svc:hunter2-secret@models.internal/llama",
            "sk-proj-" + "a1" * 20, "Bearer eyJhbGciOi.JIUzI1NiJ9.bearer-secret-value"]
_TEXT = st.sampled_from(["Qwen/Qwen3-8B", "0", "stop", "engine", "model_name", "+Inf", "0.5",
                         *_SECRETS]) | st.text(max_size=12)
_NUMBER = st.floats(allow_nan=False, allow_infinity=False) | st.integers(-10**6, 10**6)
_LABELS = st.dictionaries(_TEXT, _TEXT, max_size=3)
_HIST = st.fixed_dictionaries(
    {"labels": _LABELS, "le": st.lists(_TEXT, max_size=4), "counts": st.lists(_NUMBER, max_size=4),
     "sum": st.none() | _NUMBER, "count": st.none() | _NUMBER})
_ODD = st.none() | st.booleans() | _NUMBER | _TEXT | st.lists(_TEXT | _NUMBER, max_size=3)
_COMPACT = st.fixed_dictionaries(
    {"samples": st.dictionaries(_TEXT, st.lists(st.tuples(_LABELS, _NUMBER).map(list),
                                                 max_size=3), max_size=3),
     "histograms": st.dictionaries(_TEXT, st.lists(_HIST, max_size=2), max_size=2)},
    optional={"vllm_names": st.integers(0, 50), "vllm_engine_label": st.booleans(),
              "names_sha256": _TEXT, "extra": _ODD})


def _report(compact):
    return {"schema_version": 1, "servers": [{"metrics": {"text": "", "compact": compact}}]}


@settings(max_examples=400, deadline=None)
@given(_COMPACT | st.recursive(_ODD, lambda inner: st.lists(inner, max_size=3)
                               | st.dictionaries(_TEXT, inner, max_size=3), max_leaves=12))
def test_a_compact_block_is_redacted_as_the_general_way_redacts_it(compact):
    sent = copy.deepcopy(compact)
    stored = redact_report(_report(compact))["servers"][0]["metrics"]["compact"]
    assert stored == _strings(copy.deepcopy(sent), set())
    assert compact == sent  # the block the agent sent is not edited


def test_a_credential_in_a_label_or_a_bucket_bound_is_redacted():
    compact = {"samples": {"vllm:num_requests_running": [[{"model_name": _SECRETS[1]}, 1.0]]},
               "histograms": {"vllm:e2e_request_latency_seconds": [
                   {"labels": {}, "le": [_SECRETS[0]], "counts": [1.0], "sum": None,
                    "count": None}]}}
    stored = str(redact_report(_report(compact)))
    assert "hunter2-secret" not in stored and _SECRETS[0] not in stored
