"""Upgrade planner and the offline CLIs behind ``manage.py recommend`` /
``manage.py plan_upgrade`` (advice.recommend.cli, no Django needed)."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from advice import planner
from advice.recommend import cli

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rkit import AWQ_31B, host_report, serve  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "audit"))
from casekit import all_case_paths, case_to_report, seed_report  # noqa: E402

H100 = "NVIDIA H100 80GB HBM3"


def _ids(findings: list[dict]) -> set[str]:
    return {f["rule_id"] for f in findings}


def test_025_to_027_on_a_gemma4_tool_server_is_risky_and_lists_the_open_issues() -> None:
    report = seed_report("PUSH", version="0.25.1")
    plan = planner.plan_server(report["servers"][0], report, "0.27.0")
    assert plan["verdict"] == "risky"
    assert plan["current"] == "0.25.1" and plan["target"] == "0.27.0"
    assert "gemma4-version-ceiling" in _ids(plan["appear"])
    assert "https://github.com/vllm-project/vllm/issues/50477" in plan["upstream_issues"]
    assert "https://github.com/vllm-project/vllm/issues/50159" in plan["upstream_issues"]
    assert any("ceiling" in reason for reason in plan["reasons"])


def test_023_to_0251_on_a_thinking_tools_server_clears_the_cot_leak() -> None:
    report = seed_report("LIGHT", version="0.23.0")
    plan = planner.plan_server(report["servers"][0], report, "v0.25.1")
    assert "gemma4-thinking-tools-cot-leak" in _ids(plan["disappear"])
    assert "gemma4-thinking-tools-cot-leak" not in _ids(plan["appear"])
    assert plan["verdict"] in ("safe", "risky")


def test_a_critical_finding_that_appears_blocks_the_upgrade() -> None:
    mtp = '{"model":"google/gemma-4-31B-it-assistant","num_speculative_tokens":4}'
    report = host_report(H100, 2, serve("google/gemma-4-31B-it", "--tensor-parallel-size",
                                        "2", "--speculative-config", mtp), version="0.23.0")
    plan = planner.plan_server(report["servers"][0], report, "0.25.1")
    assert plan["verdict"] == "blocked"
    assert any(f["severity"] == "critical" for f in plan["appear"] + plan["escalate"])


def test_a_pending_upgrade_is_planned_as_what_the_next_restart_brings() -> None:
    report = host_report(H100, 2, serve(AWQ_31B, "--tensor-parallel-size", "2",
                                        "--tool-call-parser", "gemma4"),
                         version="0.25.1", installed="0.27.1")
    plans = planner.pending_upgrades(report)
    assert [p["label"] for p in plans] == ["will become 0.27.1 on next restart"]
    assert plans[0]["verdict"] == "risky"


def test_a_server_without_a_pending_upgrade_has_no_pending_plan() -> None:
    report = host_report(H100, 1, serve(AWQ_31B), version="0.25.1")
    assert planner.pending_upgrades(report) == []


def test_the_fleet_view_counts_the_servers_each_candidate_puts_at_risk() -> None:
    gemma = seed_report("PUSH", version="0.25.1")
    others = [case_to_report(p) for p in all_case_paths() if p.name.startswith("022")]
    fleet = planner.plan_fleet([gemma, *others], ["0.25.1", "0.27.0"])
    rows = {row["target"]: row for row in fleet["candidates"]}
    assert rows["0.25.1"]["risky"] + rows["0.25.1"]["blocked"] == 0
    assert rows["0.27.0"]["risky"] + rows["0.27.0"]["blocked"] >= 1
    assert rows["0.27.0"]["servers"] == 2


def test_a_target_that_is_not_a_version_is_refused() -> None:
    report = seed_report("LIGHT")
    with pytest.raises(ValueError, match="not a vLLM version"):
        planner.plan_server(report["servers"][0], report, "latest")


def test_a_target_past_the_verified_release_is_risky_even_without_findings() -> None:
    report = host_report(H100, 1, serve("meta-llama/Llama-3.1-8B-Instruct"), version="0.30.0",
                         template=None)
    plan = planner.plan_server(report["servers"][0], report, "0.31.0")
    assert plan["verdict"] == "risky"
    assert any("newer than the release" in r for r in plan["reasons"])


def test_known_versions_include_the_ceiling_and_the_verified_release() -> None:
    versions = planner.known_versions()
    assert "0.25.1" in versions and "0.30.0" in versions
    assert versions == sorted(versions, key=lambda v: tuple(map(int, v.split("."))),
                              reverse=True)


def _write(tmp_path: Path, report: dict) -> str:
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report), encoding="utf-8")
    return str(path)


def test_recommend_cli_prints_exactly_the_issue_json_shape(tmp_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    code = cli.run_recommend(_write(tmp_path, seed_report("PUSH")), "chat", "json", out, err)
    assert code == 0, err.getvalue()
    data = json.loads(out.getvalue())
    assert set(data) == {"servers", "calibration"}
    server = data["servers"][0]
    assert set(server) == {"pid", "layout", "replicas", "diff", "notes", "prediction"}
    assert server["layout"] == "2 x TP=1"
    assert all(set(r) == {"argv", "gpus"} for r in server["replicas"])
    assert all(set(d) == {"flag", "current", "recommended", "reason", "references"}
               for d in server["diff"])


def test_recommend_cli_text_shows_the_command_and_the_reasons(tmp_path: Path) -> None:
    out = io.StringIO()
    assert cli.run_recommend(_write(tmp_path, seed_report("PUSH")), "chat", "text", out,
                             io.StringIO()) == 0
    text = out.getvalue()
    assert "vllm serve cyankiwi/gemma-4-31B-it-AWQ-4bit" in text
    assert "docker run" in text and "why:" in text


@pytest.mark.parametrize("content", ["not json", json.dumps({"schema_version": 1})])
def test_recommend_cli_exits_2_on_invalid_input(tmp_path: Path, content: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content, encoding="utf-8")
    err = io.StringIO()
    assert cli.run_recommend(str(path), None, "json", io.StringIO(), err) == 2
    assert "invalid input" in err.getvalue()


def test_plan_cli_reports_plans_pending_and_the_fleet(tmp_path: Path) -> None:
    report = host_report(H100, 2, serve(AWQ_31B, "--tool-call-parser", "gemma4"),
                         version="0.25.1", installed="0.27.1")
    out = io.StringIO()
    assert cli.run_plan([_write(tmp_path, report)], ["0.27.0"], None, "json", out,
                        io.StringIO()) == 0
    data = json.loads(out.getvalue())
    assert data["plans"][0]["verdict"] == "risky"
    assert data["pending"][0]["label"] == "will become 0.27.1 on next restart"
    assert data["fleet"] == [{"target": "0.27.0", "servers": 1, "blocked": 0, "risky": 1,
                              "safe": 0, "breaks": 0}]


def test_plan_cli_exits_2_on_a_target_that_is_not_a_version(tmp_path: Path) -> None:
    err = io.StringIO()
    code = cli.run_plan([_write(tmp_path, seed_report("LIGHT"))], ["stable"], None, "json",
                        io.StringIO(), err)
    assert code == 2 and "not a vLLM version" in err.getvalue()


def test_the_planner_lists_the_options_the_target_release_refuses() -> None:
    report = host_report(H100, 1, serve(AWQ_31B, "--disable-log-requests",
                                        "--num-scheduler-steps", "8"), version="0.9.2")
    plan = planner.plan_server(report["servers"][0], report, "0.11.0")
    assert [(r["flag"], r["removed_in"]) for r in plan["refused_flags"]] == \
        [("--num-scheduler-steps", "0.11.0")]  # --disable-log-requests exists on 0.11
    assert "up-removed-flags" in _ids(plan["appear"])
    assert plan["verdict"] != "safe"
