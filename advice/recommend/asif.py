"""Evaluate a plan as if it ran on the host: the self-consistency check.

Builds a contract report with the recommended argv per replica, the replica's GPUs, the
recommended vLLM version, the chat template the command serves and what the agent found in
the model's files (a checkpoint without a chat template); no metrics (the command
has not served traffic yet), then builds contexts (audit.kb.context) and evaluates the
knowledge base. The same numbers the rules use (geometry estimates, knees) come back in the
contexts, so the recommendation reads them rather than re-deriving them.
"""

from __future__ import annotations

import copy
from typing import Any

from advice.recommend.plan import Plan, render_argv
from audit.kb.context import build_context
from audit.kb.engine import SEVERITY_RANK, FindingResult, KnowledgeBase
from audit.kb.templates import model_file_lines

ABOVE_MEDIUM = ("critical", "high")


def replica_server(plan: Plan, group: list[dict[str, Any]], index: int,
                   base: dict[str, Any]) -> dict[str, Any]:
    """Contract ``servers[]`` entry for replica ``index`` of ``plan``."""
    port = replica_port(plan, index)
    entry = {
        "pid": int(base.get("pid") or 1) + index, "started_at": None,
        "argv": render_argv(plan, port if len(plan.groups) > 1 or "port" in plan.values
                            else None),
        "env": dict(plan.env), "container_image": None,
        "base_url": f"http://127.0.0.1:{port}",
        "gpu_uuids": [g.get("uuid") for g in group if g.get("uuid")],
        "vllm_version": plan.version, "installed_vllm_version": plan.version,
        "models": [], "chat_template": copy.deepcopy(plan.template), "metrics": None,
        # what the agent found in the model's files holds for any command serving them: a
        # checkpoint without a chat template stays without one unless the plan passes one
        "errors": model_file_lines(base.get("errors")),
    }
    if base.get("container_mounts"):
        entry["container_mounts"] = dict(base["container_mounts"])
    return entry


def replica_port(plan: Plan, index: int) -> int:
    """Port of replica ``index``: the current --port (default 8000) plus the index."""
    port = plan.values.get("port")
    return (port if isinstance(port, int) else 8000) + index


def asif_report(plan: Plan, report: dict[str, Any], server: dict[str, Any]) -> dict[str, Any]:
    """The host's report with this server replaced by the plan's replicas."""
    out = {k: copy.deepcopy(v) for k, v in report.items() if k != "servers"}
    groups = plan.groups or [[]]
    out["servers"] = [replica_server(plan, g, i, server) for i, g in enumerate(groups)]
    return out


def contexts(plan: Plan, report: dict[str, Any], server: dict[str, Any]) -> list[dict]:
    """One context per replica of the plan, as if it ran on the host."""
    asif = asif_report(plan, report, server)
    return [build_context(s, asif, None) for s in asif["servers"]]


def evaluate(plan: Plan, report: dict[str, Any], server: dict[str, Any],
             kb: KnowledgeBase) -> tuple[list[FindingResult], list[dict]]:
    """(findings over all replicas, deduplicated by rule id keeping the worst; contexts)."""
    ctxs = contexts(plan, report, server)
    worst: dict[str, FindingResult] = {}
    for ctx in ctxs:
        for finding in kb.evaluate(ctx):
            seen = worst.get(finding.rule_id)
            if seen is None or SEVERITY_RANK[finding.severity] < SEVERITY_RANK[seen.severity]:
                worst[finding.rule_id] = finding
    ordered = sorted(worst.values(), key=lambda f: (SEVERITY_RANK[f.severity], f.rule_id))
    return ordered, ctxs


def blocking(findings: list[FindingResult]) -> list[FindingResult]:
    """Findings above medium (what the recommended command must never raise)."""
    return [f for f in findings if f.severity in ABOVE_MEDIUM]
