"""Self-consistency: the recommended command, evaluated as if it ran on that host, raises
nothing at medium or above that the recommendation does not explain next to it, for every
shared case (tests/audit/casekit) and both seed recipes. The check here is independent of the
library's own self-check: it rebuilds a contract report from the returned argv, environment,
GPUs, release and template, builds contexts with audit.kb.context and evaluates the knowledge
base itself.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from advice.recommend import recommend_report
from audit.kb.context import build_contexts
from audit.kb.engine import load_rules
from fleet_agent.schema import parse_report

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "audit"))
from casekit import (  # noqa: E402
    all_case_paths,
    at_least,
    case_id,
    case_to_report,
    seed_report,
)

KB = load_rules()
WORKLOADS = (None, "chat", "long-context", "mixed", "latency")


def _as_running(item: dict, report: dict) -> dict:
    """The host's report with the recommended replicas as its servers."""
    servers = []
    for index, replica in enumerate(item["replicas"]):
        servers.append({
            "pid": 7000 + index, "argv": replica["argv"],
            "env": {k: v for k, v in replica["env"].items()
                    if not k.endswith("_VISIBLE_DEVICES")},
            "gpu_uuids": replica["gpu_uuids"], "vllm_version": item["version"]["recommended"],
            "installed_vllm_version": item["version"]["recommended"],
            "chat_template": item["chat_template"], "metrics": None, "errors": [],
            "base_url": f"http://127.0.0.1:{replica['port']}"})
    mounts = [s.get("container_mounts") for s in report["servers"] if s.get("container_mounts")]
    if mounts:
        for server in servers:
            server["container_mounts"] = mounts[0]
    out = {**report, "servers": servers}
    parse_report(out)
    return out


def unexplained(item: dict, report: dict, kb=KB) -> list[str]:
    """Findings at medium or above the recommended command raises, evaluated independently,
    that the recommendation does not explain (``item["explained"]``, each naming the
    release it concerns)."""
    explained = {e["rule_id"]: e for e in item["explained"]}
    for entry in explained.values():
        assert f"vLLM {item['version']['recommended']}" in entry["why"], entry
    running = _as_running(item, report)
    out = []
    for ctx in build_contexts(running):
        out += [f"{f.rule_id} ({f.severity})" for f in kb.evaluate(ctx)
                if at_least(f.severity, "medium") and f.rule_id not in explained
                and not f.evidence.get("cannot_check")]
    return out


def _assert_clean(report: dict, workload: str | None, label: str) -> None:
    result = recommend_report(report, workload=workload, kb=KB)
    for item in result["servers"]:
        if item["status"] != "ok":
            assert item["replicas"] == [] and item["notes"], label
            continue
        assert item["replicas"], label
        assert unexplained(item, report) == [], f"{label} workload={workload}"


@pytest.mark.parametrize("path", all_case_paths(), ids=case_id)
@pytest.mark.parametrize("workload", WORKLOADS)
def test_every_shared_case_gets_a_command_that_raises_nothing_above_medium(
        path: Path, workload: str | None) -> None:
    _assert_clean(case_to_report(path), workload, case_id(path))


@pytest.mark.parametrize("recipe", ["LIGHT", "PUSH"])
@pytest.mark.parametrize("workload", WORKLOADS)
def test_the_seed_recipes_get_a_command_that_raises_nothing_above_medium(
        recipe: str, workload: str | None) -> None:
    _assert_clean(seed_report(recipe), workload, recipe)


def test_most_shared_cases_get_a_command_not_a_refusal() -> None:
    statuses = {}
    for path in all_case_paths():
        for item in recommend_report(case_to_report(path), kb=KB)["servers"]:
            statuses[case_id(path)] = item["status"]
    ok = [cid for cid, status in statuses.items() if status == "ok"]
    assert len(ok) >= 0.9 * len(statuses), statuses
    # An AMD host gets its own command, audited by the rules, its layout kept.
    assert statuses["005"] == "ok"
    # The refusals are the ones no flag or release cures: the weights of a 72B BF16 model
    # leave no KV headroom on 4 x 40 GB.
    assert statuses["034"] == "no_safe_command"
