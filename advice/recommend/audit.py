"""The audit every recommended command passes before it is shown.

The version search (advice.recommend.core) clears what is above medium; this module then
(1) applies the flag repairs (advice.recommend.repairs) of the *medium* findings the command
still raises, keeping a repair only when it raises nothing new, and (2) sorts every finding at
medium or above that remains into:

* **explained**: a release-level finding (an upstream bug or ceiling, a version-gated rule or
  a model property: :func:`release_level`) that no flag the knowledge base knows clears on the
  target release (no repair, or its repair changes nothing) and that does not stop the engine
  (not critical). The
  recommendation shows it next to the command with why it remains: the release it concerns,
  the release that fixes it (the rule's ``fixed_in``) or that none does yet, and the cure
  outside the command (the rule's remediation: a pin, another checkpoint, other GPUs);
* **explained** as well: a finding whose cure is a flag value only the operator has
  (``OPERATOR_INPUT``: the chat template of a checkpoint that ships none); the command keeps
  it and says which flag to add;
* **unexplained**: anything else. A command with an unexplained finding is never shown
  (status ``no_safe_command``).

Shapes: ``explained`` = ``[{"rule_id", "severity", "title", "why"}]``.
"""

from __future__ import annotations

import re
from typing import Any

from packaging.version import InvalidVersion, Version

from advice.recommend import asif, repairs
from advice.recommend.plan import Plan
from audit.kb.engine import SEVERITY_RANK, FindingResult, KnowledgeBase

#: Findings the recommended command must clear or explain.
SHOWN_AT = "medium"
#: Findings whose cure is a flag whose value only the operator has (rule id -> what the value
#: is). The command keeps the finding and says what to add: the knowledge base cannot know
#: the template a checkpoint was trained with, and a guessed one renders wrong prompts.
OPERATOR_INPUT = {"tpl-no-chat-template": "the chat template the model was trained with"}
MAX_MEDIUM_ROUNDS = 4


def at_or_above_medium(findings: list[FindingResult]) -> list[FindingResult]:
    """Findings at medium or above."""
    return [f for f in findings if SEVERITY_RANK[f.severity] <= SEVERITY_RANK[SHOWN_AT]]


def repair_medium(plan: Plan, findings: list[FindingResult], ctxs: list[dict],
                  report: dict, server: dict, kb: KnowledgeBase, env: dict[str, Any]
                  ) -> tuple[Plan, list[FindingResult], list[dict]]:
    """Apply the flag repairs of the medium findings; each round is kept only when it raises
    nothing at a severity or rule the plan did not already raise."""
    for _ in range(MAX_MEDIUM_ROUNDS):
        medium = [f for f in findings if f.severity == "medium" and f.rule_id in repairs.REPAIRS]
        trial = plan.clone()
        if not medium or not repairs.repair(trial, ctxs[0], medium, env):
            break
        new, new_ctxs = asif.evaluate(trial, report, server, kb)
        if _worse(new, findings):
            break
        plan, findings, ctxs = trial, new, new_ctxs
    return plan, findings, ctxs


def _worse(new: list[FindingResult], old: list[FindingResult]) -> bool:
    before = {f.rule_id: SEVERITY_RANK[f.severity] for f in at_or_above_medium(old)}
    return any(f.rule_id not in before or SEVERITY_RANK[f.severity] < before[f.rule_id]
               for f in at_or_above_medium(new))


def flag_fixable(finding: FindingResult, plan: Plan, ctx: dict, env: dict[str, Any]) -> bool:
    """Whether the knowledge base has a flag repair for ``finding`` that still changes the
    plan (a repair that changes nothing means no flag clears it)."""
    fix = repairs.REPAIRS.get(finding.rule_id)
    return fix is not None and fix(plan.clone(), ctx, finding, env)


def release_level(finding: FindingResult, kb: KnowledgeBase) -> bool:
    """Whether the finding is about the release or the hardware rather than a configuration
    choice: an upstream bug or ceiling (kind ``known_issue`` / ``ceiling``), a rule gated on
    the vLLM version, a model property, or a rule on the GPU's capability (its condition
    reads ``gpu.cc`` / ``gpu.name`` / ``gpu.fp8`` / ``gpu.vendor`` / ``gpu.memory*``)."""
    try:
        rule = kb.rule(finding.rule_id)
    except KeyError:
        return False
    hardware = bool(re.search(r"\bgpu\.(cc|name|fp8|vendor|memory)", rule.condition_text))
    return rule.kind in ("known_issue", "ceiling", "model") or rule.version_gated or hardware


def _fixed_text(fixed_in: str | None, version: str | None) -> str:
    if not fixed_in:
        return "no vLLM release fixes it yet"
    try:
        later = version is None or Version(fixed_in) > Version(version)
    except InvalidVersion:
        later = True
    return f"fixed in vLLM {fixed_in}" if later else f"vLLM {fixed_in} fixed part of it"


def _first_sentence(text: str) -> str:
    text = " ".join((text or "").split())
    cut = text.find(". ")
    return (text if cut < 0 else text[:cut + 1]).rstrip(".")


def why_it_remains(finding: FindingResult, plan: Plan, kb: KnowledgeBase) -> str:
    """The sentence shown next to the command for a finding it still raises."""
    cure = _first_sentence(finding.remediation)
    if finding.rule_id in OPERATOR_INPUT:
        return f"the command cannot supply {OPERATOR_INPUT[finding.rule_id]}: {cure}"
    try:
        rule = kb.rule(finding.rule_id)
        fixed_in = rule.fixed_in
    except KeyError:
        fixed_in = None
    return (f"no flag clears it on vLLM {plan.version} ({_fixed_text(fixed_in, plan.version)})"
            + (f"; outside the command: {cure}" if cure else ""))


def sort_findings(plan: Plan, findings: list[FindingResult], ctx: dict, kb: KnowledgeBase,
                  env: dict[str, Any]) -> tuple[list[dict[str, Any]], list[FindingResult]]:
    """(explained, unexplained) over the findings at medium or above (see module doc)."""
    explained, unexplained = [], []
    for finding in at_or_above_medium(findings):
        operator = finding.rule_id in OPERATOR_INPUT
        if finding.severity == "critical" or not (operator or release_level(finding, kb)) \
                or flag_fixable(finding, plan, ctx, env):
            unexplained.append(finding)
            continue
        explained.append({"rule_id": finding.rule_id, "severity": finding.severity,
                          "title": finding.title,
                          "why": why_it_remains(finding, plan, kb)})
    return explained, unexplained
