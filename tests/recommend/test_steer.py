"""The recommended command follows a finding's steer: the direction the live invariants or
the template markers decided, never the other way."""

from __future__ import annotations

import hashlib
from pathlib import Path

from rkit import host_report, serve

from advice.recommend.core import recommend_report
from advice.recommend.plan import Plan
from advice.recommend.repairs import repair
from audit.kb.engine import FindingResult
from fleet_agent.template_markers import extract


def finding(steer: dict | None, rule_id: str = "live-over-admission") -> FindingResult:
    return FindingResult(rule_id=rule_id, severity="high", kind="metric", title="t",
                         message="m", remediation="r", references=["https://x"],
                         evidence={"steer": steer})


def test_lower_and_raise_move_max_num_seqs_only_their_way() -> None:
    plan = Plan(model="m", values={"max_num_seqs": 512})
    assert repair(plan, {}, [finding({"flag": "--max-num-seqs", "direction": "lower",
                                      "value": 250})], {})
    assert plan.values["max_num_seqs"] == 250
    assert "live-over-admission" in plan.why["max_num_seqs"].reason
    # A raise to a value below the plan's is no raise: the plan is left alone.
    assert not repair(plan, {}, [finding({"flag": "--max-num-seqs", "direction": "raise",
                                          "value": 128})], {})
    assert plan.values["max_num_seqs"] == 250


def test_a_parser_steer_sets_the_parser_and_remove_drops_it() -> None:
    plan = Plan(model="m", values={"tool_call_parser": "hermes", "reasoning_parser": "qwen3"})
    repair(plan, {}, [finding({"flag": "--tool-call-parser", "direction": "set",
                               "value": "qwen3_coder"}, "tpl-tool-parser-markup-mismatch"),
                      finding({"flag": "--reasoning-parser", "direction": "remove"},
                              "tpl-reasoning-parser-markup-mismatch")], {})
    assert plan.values["tool_call_parser"] == "qwen3_coder"
    assert plan.values["reasoning_parser"] is None


def test_json_config_keys_and_findings_without_steer_are_left_to_their_repairs() -> None:
    plan = Plan(model="m", values={"max_num_seqs": 64})
    assert not repair(plan, {}, [finding({"flag": "--speculative-config",
                                          "key": "num_speculative_tokens",
                                          "direction": "lower", "value": 1}),
                                 finding(None, "some-rule")], {})
    assert plan.values == {"max_num_seqs": 64}


def test_the_recommended_command_uses_the_parser_the_template_reads() -> None:
    """A Qwen model whose template renders <function=...> XML calls, served with hermes: the
    recommended command carries the parser the template's markers name."""
    data = (Path(__file__).resolve().parents[1] / "data" / "chat_templates"
            / "Qwen3-Coder.jinja").read_bytes()
    report = host_report("NVIDIA H100 80GB HBM3", 1, serve(
        "/srv/models/coder", "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
        "--max-model-len", "32768"), "0.32.0", template=None)
    report["servers"][0]["chat_template"] = {
        "source": "/srv/models/coder/chat_template.jinja",
        "sha256": hashlib.sha256(data).hexdigest(), "size_bytes": len(data),
        "markers": extract(data)}
    answer = recommend_report(report)["servers"][0]
    argv = answer["replicas"][0]["argv"]
    assert argv[argv.index("--tool-call-parser") + 1] == "qwen3_coder"
    change = [d for d in answer["diff"] if d["flag"] == "--tool-call-parser"]
    assert change[0]["current"] == "hermes"
    assert "tpl-tool-parser-markup-mismatch" in change[0]["reason"]
    assert answer["self_check"]["clean"]
