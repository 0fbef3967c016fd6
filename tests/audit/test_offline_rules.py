"""The offline tools try an edited rule folder: ``--rules DIR`` or ``AUDIT_RULES_DIR``.

``audit_snapshot``, ``recommend`` and ``plan_upgrade`` load the same folder the dashboard
would: a maintainer copies audit/rules, edits a rule and sees it fire
offline before deploying it. A folder that does not exist is a load error (exit 1), never
the shipped rules in disguise.
"""

from __future__ import annotations

import io
import json
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from advice.recommend import cli
from audit.kb import snapshot
from audit.kb.engine import RULES_DIR

sys.path.insert(0, str(Path(__file__).resolve().parent))
from casekit import seed_report  # noqa: E402

TRY_RULE = {
    "id": "try-an-edited-rule", "title": "An edited rule under trial", "kind": "pitfall",
    "severity": "high", "cadence": "config",
    "condition": "flags.max_model_len != null && flags.max_model_len > 1000",
    "evidence": {"mml": "flags.max_model_len"},
    "message": "max_model_len is {mml}.", "remediation": "Lower it.",
    "references": ["https://docs.vllm.ai/en/latest/configuration/engine_args.html"],
    "last_verified": "2026-11-30",
}


@pytest.fixture
def edited_rules(tmp_path: Path) -> Path:
    """A copy of the shipped rules plus one new rule that fires on the PUSH recipe."""
    folder = tmp_path / "rules"
    shutil.copytree(RULES_DIR, folder)
    (folder / "zz_trial.yaml").write_text(yaml.safe_dump({"rules": [TRY_RULE]}))
    return folder


@pytest.fixture
def report_file(tmp_path: Path) -> str:
    path = tmp_path / "push.json"
    path.write_text(json.dumps(seed_report("PUSH", version="0.26.0")))
    return str(path)


def snapshot_rule_ids(report_file: str, **kwargs) -> set[str]:
    out, err = io.StringIO(), io.StringIO()
    assert snapshot.run([report_file], out=out, err=err, **kwargs) == 0, err.getvalue()
    [report] = json.loads(out.getvalue())["reports"]
    return {f["rule_id"] for s in report["servers"] for f in s["findings"]}


def test_audit_snapshot_fires_an_edited_rule_given_with_rules(report_file, edited_rules,
                                                              monkeypatch):
    monkeypatch.delenv("AUDIT_RULES_DIR", raising=False)
    assert "try-an-edited-rule" not in snapshot_rule_ids(report_file)
    assert "try-an-edited-rule" in snapshot_rule_ids(report_file, rules=str(edited_rules))


def test_audit_snapshot_honours_audit_rules_dir(report_file, edited_rules, monkeypatch):
    monkeypatch.setenv("AUDIT_RULES_DIR", str(edited_rules))
    assert "try-an-edited-rule" in snapshot_rule_ids(report_file)


def test_the_command_lines_take_rules(report_file, edited_rules, monkeypatch):
    monkeypatch.delenv("AUDIT_RULES_DIR", raising=False)
    args = snapshot.build_parser().parse_args([report_file, "--rules", str(edited_rules)])
    assert "try-an-edited-rule" in snapshot_rule_ids(report_file, rules=args.rules)
    assert cli.recommend_parser().parse_args([report_file, "--rules", "x"]).rules == "x"
    assert cli.plan_parser().parse_args([report_file, "--target", "0.25.1",
                                         "--rules", "x"]).rules == "x"


@pytest.mark.parametrize("tool", ["snapshot", "recommend", "plan"])
def test_a_missing_rules_folder_is_a_load_error_naming_it(tool, report_file, tmp_path):
    missing = str(tmp_path / "nope")
    out, err = io.StringIO(), io.StringIO()
    if tool == "snapshot":
        code = snapshot.run([report_file], out=out, err=err, rules=missing)
    elif tool == "recommend":
        code = cli.run_recommend(report_file, None, "json", out=out, err=err, rules=missing)
    else:
        code = cli.run_plan([report_file], ["0.25.1"], None, "json", out=out, err=err,
                            rules=missing)
    assert code == 1
    assert missing in err.getvalue() and "rules folder not found" in err.getvalue()


def test_recommend_loads_the_edited_folder(report_file, edited_rules, monkeypatch):
    (edited_rules / "zz_trial.yaml").write_text("rules: [{id: broken}]\n")
    out, err = io.StringIO(), io.StringIO()
    code = cli.run_recommend(report_file, None, "json", out=out, err=err,
                             rules=str(edited_rules))
    assert code == 1 and "zz_trial.yaml" in err.getvalue()


def test_audit_snapshot_text_says_so_when_a_report_has_no_vllm_server(tmp_path: Path):
    report = seed_report("PUSH")
    report["servers"] = []
    path = tmp_path / "idle.json"
    path.write_text(json.dumps(report))
    out, err = io.StringIO(), io.StringIO()
    assert snapshot.run([str(path)], "text", out=out, err=err) == 0, err.getvalue()
    assert "no vLLM server found in this report (2 GPUs, 0 failed starts)" in out.getvalue()
