"""The dashboard's whole-report checks give the same answers on every repeat of a report:
the contract's value checks (depth, NaN/Infinity, NUL, lone surrogates) and the second
redaction pass, whose compact /metrics form, argv and env are redacted in the second
report exactly as in the first."""

from __future__ import annotations

import copy
import json

import pytest

from fleet_agent.report_redaction import redact_report
from fleet_agent.schema import REDACTED, json_problems

HF = "hf_" + "Z" * 34


def test_nesting_to_the_limit_passes_and_one_level_more_is_named() -> None:
    assert json_problems({"a": [[{"b": 1, "c": "[[[["}]]}, max_depth=4) == []
    assert json_problems({"a": [[{"b": 1}], [{"c": []}]]}, max_depth=4) == [
        {"path": "a[1][0].c", "message": "nested deeper than 4 levels"}]
    assert json_problems({"a": [[{"b": 1}], [{"c": []}]]}, max_depth=5) == []


@pytest.mark.parametrize("data,path,message", [
    ({"gpus": [{"temperature_c": float("nan")}]}, "gpus[0].temperature_c",
     "NaN/Infinity is not a number"),
    ({"m": {"compact": {"samples": {"x": [[{}, float("-inf")]]}}}}, "m.compact.samples.x[0][1]",
     "NaN/Infinity is not a number"),
    ({"host": {"labels": {"k\x00": "v"}}}, "host.labels.k\x00", "key contains a NUL character"),
    ({"argv": ["a", "b\ud800"]}, "argv[1]", "contains a lone surrogate (not UTF-8)"),
    ({"env": {"K\udfff": "v"}}, "env.K\udfff", "key contains a lone surrogate (not UTF-8)"),
])
def test_a_bad_value_is_named_by_its_path(data, path, message) -> None:
    assert json_problems(data) == [{"path": path, "message": message}]


def test_text_that_only_looks_like_a_bad_value_passes() -> None:
    data = {"errors": ["a literal \\u0000 and \\ud800 in a log", "NaN", "Infinity", "[[[["],
            "labels": {"le": "+Inf"}, "ok": ("tuple", 1.5), "n": [1e308, -0.0, 2**70]}
    assert json_problems(data) == []


def test_a_report_with_no_problem_passes_and_a_copy_with_one_is_refused() -> None:
    report = {"servers": [{"metrics": {"compact": {"samples": {
        "vllm:num_requests_running": [[{"model_name": "m"}, 1.0]]}}}}]}
    assert json_problems(report) == []
    bad = copy.deepcopy(report)
    bad["servers"][0]["metrics"]["compact"]["samples"]["vllm:num_requests_running"][0][1] = \
        float("inf")
    assert [p["path"] for p in json_problems(bad)] == [
        "servers[0].metrics.compact.samples.vllm:num_requests_running[0][1]"]


def _compact_report(model: str, argv: list[str], env: dict[str, str]) -> dict:
    labels = {"model_name": model, "engine": "0"}
    return {"servers": [{"argv": argv, "env": env, "metrics": {"text": "", "compact": {
        "samples": {"vllm:num_requests_running": [[labels, 1.0]],
                    "vllm:cache_config_info": [[{"block_size": "16", "url": model}, 1.0]]},
        "histograms": {"vllm:time_to_first_token_seconds": [
            {"labels": labels, "le": ["0.1", "+Inf"], "counts": [1.0, 2.0],
             "sum": 0.3, "count": 2.0}]}}}}]}


@pytest.mark.parametrize("secret,clean", [
    (HF, REDACTED),
    ("redis://u:pw-123456@cache:6379/0", f"redis://{REDACTED}@cache:6379/0"),
    ("https://hub/x?token=abcdef123", f"https://hub/x?token={REDACTED}"),
    (f"Authorization: Bearer {HF}x", f"Authorization: {REDACTED} {REDACTED}"),
    ("/models/x/api_key=abcdef123", f"/models/x/api_key={REDACTED}"),
])
def test_compact_label_values_are_redacted_in_every_report(secret: str, clean: str) -> None:
    argv = ["vllm", "serve", "m", "--api-key", REDACTED, "--port", "8000"]
    env = {"CUDA_VISIBLE_DEVICES": "0", "HF_TOKEN": REDACTED}
    plain = _compact_report("org/model", argv, env)
    assert redact_report(copy.deepcopy(plain)) == plain  # nothing to redact: unchanged
    for _ in range(2):  # the same values again: still redacted
        out = redact_report(_compact_report(secret, argv, env))
        compact = out["servers"][0]["metrics"]["compact"]
        assert compact["samples"]["vllm:num_requests_running"][0][0]["model_name"] == clean
        assert compact["samples"]["vllm:cache_config_info"][0][0]["url"] == clean
        assert compact["histograms"]["vllm:time_to_first_token_seconds"][0]["labels"][
            "model_name"] == clean
        assert HF not in json.dumps(out) and "pw-123456" not in json.dumps(out)


def test_secret_metric_and_label_names_are_redacted_in_the_compact_form() -> None:
    report = {"servers": [{"metrics": {"compact": {"samples": {
        f"vllm:{HF}": [[{"token=abcdef1234": "v"}, 1.0]]}}}}]}
    for _ in range(2):
        assert HF not in json.dumps(redact_report(copy.deepcopy(report)))
        assert "abcdef1234" not in json.dumps(redact_report(copy.deepcopy(report)))


def test_argv_and_env_are_redacted_after_a_clean_repeat() -> None:
    argv = ["vllm", "serve", "m", "--port", "8000"]
    env = {"CUDA_VISIBLE_DEVICES": "0"}
    for _ in range(2):
        out = redact_report({"servers": [{"argv": list(argv), "env": dict(env)}]})
        assert out["servers"][0]["argv"] == argv and out["servers"][0]["env"] == env
    for _ in range(2):
        out = redact_report({"servers": [{"argv": [*argv, "--api-key", "sk-secret-value-1"],
                                          "env": {**env, "HF_TOKEN": "tok-value-12"},
                                          "errors": ["saw sk-secret-value-1, tok-value-12"]}]})
        server = out["servers"][0]
        assert server["argv"][-2:] == ["--api-key", REDACTED]
        assert server["env"]["HF_TOKEN"] == REDACTED
        assert server["errors"] == [f"saw {REDACTED}, {REDACTED}"]
