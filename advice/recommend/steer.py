"""Follow a finding's ``steer`` (evidence ``{flag, direction, value}``, docs/knowledge-base.md
"Live invariants") when no rule-specific repair exists: the live metric and template findings
say which way a flag must move, so the recommended command moves it that way and never the
other. Flags inside a JSON config (a ``key``) are left to the rule-specific repairs."""

from __future__ import annotations

from typing import Any

from advice.recommend.plan import Plan
from audit.kb.engine import FindingResult


def steer_of(finding: FindingResult) -> dict[str, Any] | None:
    """The finding's steer when it names a plain ``--flag``, else None."""
    steer = finding.evidence.get("steer") if isinstance(finding.evidence, dict) else None
    if not isinstance(steer, dict) or steer.get("key") or not str(
            steer.get("flag") or "").startswith("--"):
        return None
    return steer


def follow(plan: Plan, ctx: dict, finding: FindingResult, env: dict) -> bool:
    """Apply ``finding``'s steer to ``plan``; True when the plan changed. ``raise`` / ``lower``
    only move the value in their direction (a plan already past it is left alone)."""
    steer = steer_of(finding)
    if steer is None:
        return False
    key = steer["flag"][2:].replace("-", "_")
    current, value, direction = plan.values.get(key), steer.get("value"), steer.get("direction")
    if direction == "remove":
        if current is None:
            return False
        plan.drop(key, f"{finding.rule_id}: {finding.title}", finding.references)
        return True
    if value is None or value == current:
        return False
    numeric = isinstance(current, (int, float)) and isinstance(value, (int, float))
    if numeric and ((direction == "raise" and value <= current)
                    or (direction == "lower" and value >= current)):
        return False
    plan.set(key, value, f"{steer['flag']} {direction} to {value} (clears {finding.rule_id}: "
             f"{finding.title})", finding.references)
    return True
