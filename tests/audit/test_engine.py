"""The rules engine (audit/kb/engine.py): load-time validation, evaluation, CEL functions,
and the offline ``audit_snapshot`` command as a support engineer runs it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from audit.kb import cel_functions as fn
from audit.kb.engine import RULES_DIR, RuleError, load_rules

sys.path.insert(0, str(Path(__file__).resolve().parent))
from casekit import seed_report  # noqa: E402
from ctxfactory import make_context  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable


def a_rule(**changes: Any) -> dict[str, Any]:
    """A valid rule mapping; ``changes`` replace (or, with value ..., delete) fields."""
    rule = {
        "id": "test-long-context", "title": "Long context", "kind": "pitfall",
        "severity": "medium", "cadence": "config",
        "condition": 'flags.max_model_len != null && flags.max_model_len > 100000',
        "evidence": {"mml": "flags.max_model_len"},
        "message": "max_model_len is {mml}.", "remediation": "Lower it.",
        "references": ["https://github.com/vllm-project/vllm/issues/1",
                       "seed:000_ffb301503ad246f2.txt#Pitfalls"],
        "last_verified": "2026-09-23", "confirmed_upstream": True,
    }
    for key, value in changes.items():
        if value is ...:
            rule.pop(key)
        else:
            rule[key] = value
    return rule


def write_rules(tmp_path: Path, *rules: dict[str, Any], name: str = "test.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"rules": list(rules)}, sort_keys=False))
    return path


def load_error(tmp_path: Path, **changes: Any) -> str:
    path = write_rules(tmp_path, a_rule(**changes))
    with pytest.raises(RuleError) as raised:
        load_rules([path])
    message = str(raised.value)
    assert str(path) in message and "test-long-context" in message
    return message


# ----------------------------------------------------------------------------- loading


def test_the_shipped_knowledge_base_loads_with_a_content_hash_version():
    kb = load_rules()
    assert len(kb.version) == 64 and int(kb.version, 16) >= 0
    assert load_rules().version == kb.version
    assert kb.verified_through == "0.30.0"
    assert {"gemma4-version-ceiling", "kb-version-not-vetted"} <= {r.id for r in kb.rules}


def test_changing_one_byte_of_a_rule_file_changes_the_version(tmp_path):
    copy = tmp_path / "rules"
    shutil.copytree(RULES_DIR, copy)
    before = load_rules([copy]).version
    seed = copy / "gemma4_seed.yaml"
    seed.write_text(seed.read_text() + "\n# touched\n")
    assert load_rules([copy]).version != before


def test_it_rejects_an_unknown_field_naming_the_file_and_rule(tmp_path):
    assert "unknown field(s) ['severty']" in load_error(tmp_path, severty="high")


def test_it_rejects_a_rule_missing_a_required_field(tmp_path):
    assert "missing required field(s) ['remediation']" in load_error(tmp_path, remediation=...)


@pytest.mark.parametrize("field,value", [
    ("kind", "bug"), ("severity", "urgent"), ("cadence", "hourly")])
def test_it_rejects_a_kind_severity_or_cadence_outside_the_vocabulary(tmp_path, field, value):
    assert f"{field}: {value!r} is not one of" in load_error(tmp_path, **{field: value})


def test_it_rejects_a_bad_pep440_specifier_in_version_in(tmp_path):
    message = load_error(tmp_path, condition='version_in(vllm.version, ">=0.26.0,<=banana")')
    assert "bad PEP 440 specifier" in message and "banana" in message


def test_it_rejects_a_bad_version_literal_in_version_lt(tmp_path):
    message = load_error(tmp_path, condition='version_lt(vllm.version, "zero.thirty")')
    assert "bad PEP 440 version 'zero.thirty'" in message


def test_it_checks_specifiers_nested_inside_other_calls(tmp_path):
    bad = 'model.is_gemma4 && version_in(default(vllm.version, "0.1.0"), "=>0.2")'
    assert "bad PEP 440 specifier '=>0.2'" in load_error(tmp_path, condition=bad)


def test_it_rejects_an_unknown_function(tmp_path):
    message = load_error(tmp_path, condition='semver_match(vllm.version, "1")')
    assert "unknown function(s) ['semver_match']" in message


def test_it_rejects_an_unknown_operator_as_a_syntax_error(tmp_path):
    message = load_error(tmp_path, condition='flags.max_model_len =~ 5')
    assert "condition: CEL syntax error" in message


def test_it_rejects_an_unknown_top_level_variable(tmp_path):
    message = load_error(tmp_path, condition='process.pid > 1')
    assert "unknown variable(s) ['process']" in message


def test_it_rejects_an_unknown_context_key(tmp_path):
    message = load_error(tmp_path, condition='model.familly == "gemma4-31b"')
    assert "unknown context key model.familly" in message


def test_it_rejects_a_message_placeholder_that_is_not_an_evidence_name(tmp_path):
    message = load_error(tmp_path, message="max_model_len is {max_model_len}.")
    assert "placeholder {max_model_len} is not an evidence name" in message


def test_it_rejects_a_reference_that_is_not_https_or_a_seed_ref(tmp_path):
    message = load_error(tmp_path, references=["http://example.com/issue"])
    assert "neither an https URL nor a seed" in message


def test_it_rejects_a_last_verified_that_is_not_a_date(tmp_path):
    assert "is not a YYYY-MM-DD date" in load_error(tmp_path, last_verified="last week")


def test_it_requires_confirmed_upstream_when_a_rule_cites_an_upstream_issue(tmp_path):
    assert "confirmed_upstream: required" in load_error(tmp_path, confirmed_upstream=...)
    rule = a_rule(confirmed_upstream=False)
    assert load_rules([write_rules(tmp_path, rule)]).rules[0].confirmed_upstream is False


def test_it_rejects_an_escalation_with_a_bad_severity(tmp_path):
    message = load_error(tmp_path, escalate=[{"when": "true", "severity": "severe"}])
    assert "escalate[0].severity" in message


def test_it_rejects_the_same_rule_id_in_two_files(tmp_path):
    write_rules(tmp_path, a_rule(), name="a.yaml")
    write_rules(tmp_path, a_rule(), name="b.yaml")
    with pytest.raises(RuleError, match=r"b.yaml: rule 'test-long-context': duplicate id"):
        load_rules([tmp_path])


def test_comprehension_variables_are_not_taken_for_unknown_variables(tmp_path):
    rule = a_rule(condition='flags_meta.unknown.exists(f, f.startsWith("--no-"))')
    assert load_rules([write_rules(tmp_path, rule)]).rules[0].id == "test-long-context"


# ----------------------------------------------------------------------------- evaluation


def evaluate(tmp_path: Path, ctx: dict[str, Any], *rules: dict[str, Any], cadence=None):
    return load_rules([write_rules(tmp_path, *rules)]).evaluate(ctx, cadence)


def test_a_fired_rule_renders_its_message_with_the_evidence_values(tmp_path):
    [finding] = evaluate(tmp_path, make_context("push"), a_rule())
    assert finding.message == "max_model_len is 262144."
    assert finding.evidence == {"mml": 262144} and finding.severity == "medium"


def test_a_rule_that_does_not_apply_stays_silent(tmp_path):
    assert list(evaluate(tmp_path, make_context("light"), a_rule())) == []


def test_a_failing_rule_is_recorded_and_the_other_rules_still_run(tmp_path):
    # A null compared with a number raises in CEL: a real bug in a rule, never a crash.
    broken = a_rule(id="broken-rule", condition="flags.max_model_len > 100000")
    ctx = make_context("push", {"flags.max_model_len": None})
    ctx_ok = make_context("push")
    result = evaluate(tmp_path, ctx, broken, a_rule(condition="flags.max_num_seqs > 100"))
    assert [f.rule_id for f in result] == ["test-long-context"]
    assert [f.rule_id for f in result.failures] == ["broken-rule"]
    assert "No such overload" in result.failures[0].error
    assert evaluate(tmp_path, ctx_ok, broken).failures == []


def test_the_first_matching_escalation_sets_the_severity(tmp_path):
    rule = a_rule(escalate=[{"when": "flags.tensor_parallel_size >= 4", "severity": "info"},
                            {"when": "flags.tensor_parallel_size >= 2", "severity": "high"},
                            {"when": "true", "severity": "critical"}])
    [finding] = evaluate(tmp_path, make_context("push"), rule)
    assert finding.severity == "high"


def test_a_failing_evidence_expression_yields_null_and_keeps_the_finding(tmp_path):
    rule = a_rule(evidence={"mml": "flags.max_model_len", "bad": "flags.max_model_len / 0"},
                  message="max_model_len {mml}, bad {bad}.")
    [finding] = evaluate(tmp_path, make_context("push"), rule)
    assert finding.evidence["bad"] is None and finding.message == "max_model_len 262144, bad n/a."


def test_cadence_selects_config_or_metric_rules(tmp_path):
    metric = a_rule(id="metric-rule", cadence="metrics", condition="true")
    config = a_rule(id="config-rule", condition="true")
    ctx = make_context("light")
    assert [f.rule_id for f in evaluate(tmp_path, ctx, metric, config, cadence="metrics")] \
        == ["metric-rule"]
    assert [f.rule_id for f in evaluate(tmp_path, ctx, metric, config, cadence="config")] \
        == ["config-rule"]
    assert len(evaluate(tmp_path, ctx, metric, config)) == 2


def test_findings_come_sorted_by_severity_then_rule_id(tmp_path):
    rules = [a_rule(id="b-low", severity="low", condition="true"),
             a_rule(id="a-low", severity="low", condition="true"),
             a_rule(id="z-critical", severity="critical", condition="true")]
    assert [f.rule_id for f in evaluate(tmp_path, make_context("light"), *rules)] == [
        "z-critical", "a-low", "b-low"]


def test_a_version_newer_than_verified_through_is_reported_as_not_yet_vetted():
    kb = load_rules()
    newer = {f.rule_id: f for f in kb.evaluate(make_context("light", {"vllm.version": "0.31.0"}))}
    assert newer["kb-version-not-vetted"].severity == "info"
    assert "0.31.0" in newer["kb-version-not-vetted"].message
    vetted = {f.rule_id for f in kb.evaluate(make_context("light", {"vllm.version": "0.30.0"}))}
    assert "kb-version-not-vetted" not in vetted


METRIC_RULE = a_rule(id="acceptance-low", cadence="metrics", kind="metric",
                     applies='model.speculative.method != null',
                     needs=["spec_draft_tokens", "spec_accepted_tokens"],
                     condition="metrics.spec_acceptance_rate != null "
                               "&& metrics.spec_acceptance_rate < 0.2",
                     evidence={}, message="low")


def test_a_metric_rule_says_cannot_check_when_no_metrics_were_collected(tmp_path):
    ctx = make_context("light", {"metrics.available": False})
    [finding] = evaluate(tmp_path, ctx, METRIC_RULE)
    assert finding.severity == "info" and finding.title.startswith("Cannot check")
    assert "missing data, not a healthy reading" in finding.message


def test_a_metric_rule_names_the_metric_missing_from_the_scrape(tmp_path):
    # spec_accepted_tokens is exported by every release: the scrape lacked it.
    ctx = make_context("light", {"metrics.missing": ["spec_accepted_tokens"]})
    [finding] = evaluate(tmp_path, ctx, METRIC_RULE)
    assert "spec_accepted_tokens was absent from this server's /metrics" in finding.message
    assert "--disable-log-stats" not in finding.remediation
    assert finding.evidence["missing"] == ["spec_accepted_tokens"]


TOOL_RULE = a_rule(id="tool-parser-silent", cadence="metrics", kind="metric",
                   applies="metrics.available == true", needs=["tool_parser_invocations"],
                   condition='lower(flags.tool_call_parser) == "gemma4" '
                             '&& metrics.tool_parser_invocations != null '
                             '&& metrics.tool_parser_invocations >= 50',
                   evidence={}, message="silent parser")


def tool_parser_context(**overrides: Any) -> dict[str, Any]:
    """A light context on a release whose /metrics lacks the tool-parser counter (the
    factory predates it; a real window sets it to None when absent)."""
    ctx = make_context("light", {"metrics.missing": ["tool_parser_invocations"], **overrides})
    ctx["metrics"]["tool_parser_invocations"] = None
    return ctx


def test_cannot_check_needs_the_rules_server_part_to_hold(tmp_path):
    # Near miss: no tool parser on this server, so the tool-parser rule is not about it.
    ctx = tool_parser_context(**{"vllm.version": "0.23.0", "flags.tool_call_parser": None})
    assert list(evaluate(tmp_path, ctx, TOOL_RULE)) == []


def test_cannot_check_says_the_release_does_not_expose_the_metric(tmp_path):
    # vllm:tool_call_parser_invocations first appears in the 0.24.0 wheel table.
    ctx = tool_parser_context(**{"vllm.version": "0.23.0",
                                 "flags.tool_call_parser": "gemma4"})
    [finding] = evaluate(tmp_path, ctx, TOOL_RULE)
    assert "vLLM release (0.23.0" in finding.remediation
    assert "does not expose tool_parser_invocations" in finding.remediation
    assert "tool_parser_invocations from vLLM 0.24.0" in finding.remediation
    assert "--disable-log-stats" not in finding.remediation


def test_cannot_check_names_disable_log_stats_only_when_it_is_set(tmp_path):
    ctx = make_context("light", {"metrics.available": False,
                                 "flags.disable_log_stats": True})
    [finding] = evaluate(tmp_path, ctx, METRIC_RULE)
    assert finding.remediation.startswith("--disable-log-stats is set")
    unset = make_context("light", {"metrics.available": False})
    [finding] = evaluate(tmp_path, unset, METRIC_RULE)
    assert "--disable-log-stats is not set" in finding.remediation


def test_a_metric_rule_treats_an_absent_spec_counter_as_missing_data(tmp_path):
    ctx = make_context("light", {"metrics.spec_draft_tokens": None})
    [finding] = evaluate(tmp_path, ctx, METRIC_RULE)
    assert finding.evidence == {"cannot_check": True, "metrics_available": True,
                                "missing": ["spec_draft_tokens"]}


def test_a_metric_rule_that_does_not_apply_says_nothing_even_without_metrics(tmp_path):
    ctx = make_context("plain", {"metrics.available": False})
    assert list(evaluate(tmp_path, ctx, METRIC_RULE)) == []


# ----------------------------------------------------------------------------- functions


@pytest.mark.parametrize("version,spec,inside", [
    ("0.26.0rc2", ">=0.26.0,<=0.30.0", True),      # an rc of 0.26.0 carries 0.26.0's code
    ("0.29.1rc1.dev339+gda9888462", ">=0.26.0,<=0.30.0", True),
    ("0.30.0.dev5", "<0.30.0", False),             # a build of 0.30.0 counts as 0.30.0
    ("0.30.0rc1", ">=0.30.0", True),
    ("0.25.1", ">=0.26.0,<=0.30.0", False),
    ("0.30.1", "<=0.30.0", False),
    # a post release is a release of its own, after X.Y.Z, and its builds count as it
    ("0.5.3.post1", "<0.5.3.post1", False),
    ("0.5.3.post1.dev2", "<0.5.3.post1", False),
    ("0.5.3", "<0.5.3.post1", True),
    ("0.5.3.post1", ">=0.5.3.post1", True),
    ("0.5.3.post1", ">=0.5.3,<0.5.4", True),
    (None, ">=0.1", False),
    ("not-a-version", ">=0.1", False),
])
def test_version_in_counts_dev_and_rc_builds_of_a_release_as_that_release(version, spec, inside):
    assert fn.version_in(version, spec) is inside


@pytest.mark.parametrize("version", ["0.29.9", "0.30.0rc1", "0.30.0.dev3", "0.30.0",
                                     "0.30.0.post1", "0.31.0a1"])
def test_version_lt_and_version_ge_put_every_version_on_exactly_one_side(version):
    assert fn.version_lt(version, "0.30.0") != fn.version_ge(version, "0.30.0")


RELEASE = st.tuples(st.integers(0, 2), st.integers(0, 40), st.integers(0, 5))
SUFFIX = st.sampled_from(["", "rc1", "rc2.dev7", ".dev339", ".post1", "a1", "rc1.dev3+gabc12"])


@given(version=RELEASE, suffix=SUFFIX, bound=RELEASE)
def test_every_build_falls_on_exactly_one_side_of_any_release(version, suffix, bound):
    text = ".".join(map(str, version)) + suffix
    limit = ".".join(map(str, bound))
    assert fn.version_lt(text, limit) != fn.version_ge(text, limit)
    # A build of release X compares like X itself.
    assert fn.version_ge(text, limit) == (version >= bound)


def test_the_helper_functions_are_null_safe():
    assert fn.contains_any(None, ["a"]) is False and fn.contains_any("AbC", ["b"]) is True
    assert fn.default(None, 3) == 3 and fn.default(0, 3) == 0
    assert fn.lower(None) is None and fn.num(None) is None and fn.ratio(1, 0) is None
    assert fn.version_lt(None, "0.1") is False and fn.version_ge("0.1", None) is False


# ----------------------------------------------------------------------------- audit_snapshot


def run_snapshot(*args: str) -> subprocess.CompletedProcess:
    # An empty environment, as on a fresh clone: no DATABASE_URL, SECRET_KEY or settings.
    return subprocess.run([PYTHON, "manage.py", "audit_snapshot", *args], cwd=REPO,
                          env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                          timeout=120)


def test_audit_snapshot_prints_the_documented_json_for_a_report_file(tmp_path):
    report = seed_report("PUSH", version="0.26.0")
    path = tmp_path / "push.json"
    path.write_text(json.dumps(report))
    done = run_snapshot(str(path), "--format", "json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    [entry] = out["reports"]
    assert entry["file"] == str(path) and entry["hostname"] == "seed-push"
    [server] = entry["servers"]
    assert server["pid"] == 4242 and server["base_url"].startswith("http://")
    ceiling = next(f for f in server["findings"] if f["rule_id"] == "gemma4-version-ceiling")
    assert set(ceiling) >= {"rule_id", "severity", "kind", "title", "message", "remediation",
                            "references", "evidence"}
    assert ceiling["severity"] == "high" and ceiling["evidence"]["version"] == "0.26.0"
    ranks = ["critical", "high", "medium", "low", "info"]
    order = [ranks.index(f["severity"]) for f in server["findings"]]
    assert order == sorted(order)


def test_audit_snapshot_with_history_sees_a_restart_without_change(tmp_path):
    first = seed_report("LIGHT")
    second = json.loads(json.dumps(first))
    second["report_id"] = "00000000-0000-4000-8000-000000000002"
    second["collected_at"] = "2026-09-30T12:05:00+00:00"
    second["servers"][0].update(pid=5252, started_at="2026-09-30T12:03:00+00:00")
    paths = []
    for index, report in enumerate((first, second)):
        paths.append(tmp_path / f"r{index}.json")
        paths[-1].write_text(json.dumps(report))
    done = run_snapshot(*map(str, paths), "--history", "--format", "json")
    assert done.returncode == 0, done.stderr
    rules = [{f["rule_id"] for f in r["servers"][0]["findings"]}
             for r in json.loads(done.stdout)["reports"]]
    assert "restart-without-config-change" not in rules[0]
    assert "restart-without-config-change" in rules[1]


def test_audit_snapshot_exits_2_with_the_reason_on_an_invalid_report(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"schema_version": 1}))
    done = run_snapshot(str(path))
    assert done.returncode == 2
    assert "bad.json" in done.stderr and "report_id" in done.stderr and done.stdout == ""


def test_audit_snapshot_exits_2_on_an_unreadable_file(tmp_path):
    done = run_snapshot(str(tmp_path / "missing.json"), "--format", "text")
    assert done.returncode == 2 and "cannot read" in done.stderr


def test_the_kb_library_and_snapshot_import_no_django():
    code = ("import sys, audit.kb.engine, audit.kb.snapshot; "
            "sys.exit(1 if any(m.startswith('django') for m in sys.modules) else 0)")
    done = subprocess.run([PYTHON, "-c", code], cwd=REPO, env={"PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_load_rules_prints_the_version_and_refuses_an_invalid_file(tmp_path):
    command = [PYTHON, "manage.py", "load_rules", "--check"]
    env = {"PATH": "/usr/bin:/bin"}
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert load_rules().version in done.stdout
    bad = write_rules(tmp_path, a_rule(condition='version_ge(vllm.version, "x.y")'))
    done = subprocess.run([*command, str(bad)], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1 and "test-long-context" in done.stderr
