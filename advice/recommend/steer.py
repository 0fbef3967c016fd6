"""Live findings and the server model steer the recommended command before its audit.

A command that has not run cannot raise a live (metrics) finding, so what the running server
showed is applied to the plan here, before the knowledge base audits it
(advice.recommend.audit):

* a finding whose rule declares ``steer: {flag, direction, value}`` (docs/knowledge-base.md,
  "Findings that steer the command"), or whose evidence computes one (the live invariants'
  ``steer`` evidence, "Live invariants"), sets that flag: ``lower`` caps it at ``value``,
  ``raise`` floors it, ``set`` sets it, ``off`` (``remove``) drops it;
* ``eagle-tp-acceptance-collapse`` (an EAGLE drafter whose acceptance collapsed under tensor
  parallel, seed 000 "EAGLE3 + TP=2: verify acceptance rate after every engine upgrade",
  vllm#50158) drops the drafter from a command with TP > 1;
* ``--max-model-len`` is never raised above what the traffic needs (:data:`TRAFFIC_FACTOR` x
  the observed p99 prompt length, rounded up to 1024, when the running value is lower), nor
  above the model's native context, nor, while the layout stays the one the engine measured,
  above the longest request the engine's pool holds (audit.kb.servermodel).

Entry points: :func:`steer` (mutates a :class:`~advice.recommend.plan.Plan`) and
:func:`follow`, the repair that applies a blocking finding's evidence steer during the audit
(a template finding's parser, say) when no rule-specific repair exists.
"""

from __future__ import annotations

from typing import Any

from advice.recommend.plan import Plan
from audit.kb.engine import FindingResult, KnowledgeBase
from audit.kb.servermodel import UNBOUNDED, cap_for_length

#: Headroom over the observed p99 prompt for answers and growth (a request is prompt +
#: output; vLLM's prompt histogram has no output part).
TRAFFIC_FACTOR = 2
STEP = 1024
COLLAPSE_RULE = "eagle-tp-acceptance-collapse"
COLLAPSE_REFS = ["https://github.com/vllm-project/vllm/issues/50158",
                 "seed:000_ffb301503ad246f2.txt#EAGLE3 + TP=2: verify acceptance rate after "
                 "every engine upgrade"]


def live_findings(ctx: dict[str, Any], kb: KnowledgeBase) -> list[FindingResult]:
    """The running server's findings (its real context, metrics included), without the
    "cannot check" notes (they carry the rule id but saw nothing)."""
    return [f for f in kb.evaluate(ctx) if not f.evidence.get("cannot_check")]


def steer(plan: Plan, ctx: dict[str, Any], findings: list[FindingResult]) -> None:
    """Apply every steering source to ``plan`` (see the module docstring)."""
    for finding in findings:
        spec = finding.steer or steer_of(finding)
        if spec:
            _apply(plan, finding, spec)
    collapse = next((f for f in findings if f.rule_id == COLLAPSE_RULE), None)
    if collapse and plan.tp > 1 and plan.values.get("speculative_config"):
        rate = collapse.evidence.get("rate")
        shown = f"{rate:.0%}" if isinstance(rate, (int, float)) else "collapsed"
        plan.drop("speculative_config", f"the drafter's acceptance under TP={plan.tp} on this "
                  f"server is {shown} ({COLLAPSE_RULE}): speculative decoding off until a "
                  "drafter is verified at this layout", COLLAPSE_REFS + collapse.references)
    cap_context(plan, ctx)


def steer_of(finding: FindingResult) -> dict[str, Any] | None:
    """The steer a finding's evidence computed (the live invariants' ``steer``) when it names
    a plain ``--flag``, else None; flags inside a JSON config (a ``key``) are left to the
    rule-specific repairs."""
    steer = finding.evidence.get("steer") if isinstance(finding.evidence, dict) else None
    if not isinstance(steer, dict) or steer.get("key") or not str(
            steer.get("flag") or "").startswith("--"):
        return None
    return steer


def follow(plan: Plan, ctx: dict, finding: FindingResult, env: dict) -> bool:
    """Repair signature (advice.recommend.repairs): apply ``finding``'s evidence steer to
    ``plan``; True when the plan changed."""
    spec = steer_of(finding)
    return bool(spec) and _apply(plan, finding, spec)


def _apply(plan: Plan, finding: FindingResult, spec: dict[str, Any]) -> bool:
    """Move one flag the way ``spec`` says; True when the plan changed. ``raise``/``lower``
    only move the value in their direction (a plan already past it is left alone)."""
    key = str(spec.get("flag", "")).lstrip("-").replace("-", "_")
    direction, value = spec.get("direction"), spec.get("value")
    if not key:
        return False
    why = f"{finding.title} ({finding.rule_id})"
    if direction in ("off", "remove"):
        if plan.values.get(key) is None:
            return False
        plan.drop(key, why, finding.references)
        return True
    if value is None or isinstance(value, (dict, list)):
        return False
    current = plan.values.get(key)
    if value == current:
        return False
    numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
    if direction == "set" or not numeric or not isinstance(current, (int, float)):
        if direction == "set" or current is None or not numeric:
            plan.set(key, value, f"{value}: {why}", finding.references)
            return True
        return False
    if (direction == "lower" and current > value) or (direction == "raise" and current < value):
        plan.set(key, value, f"{value}: {why}", finding.references)
        return True
    return False


def _p99_prompt(ctx: dict[str, Any]) -> float | None:
    metrics = ctx.get("metrics") or {}
    for block in (metrics, metrics.get("lifetime") or {}):
        value = block.get("prompt_len_p99")
        if isinstance(value, (int, float)) and value > 0:
            return float(value)
    return None


def cap_context(plan: Plan, ctx: dict[str, Any]) -> None:
    """Keep the plan's ``--max-model-len`` within the traffic, the native context and the
    engine's pool (see the module docstring); each cap says why."""
    model = ctx.get("server_model") or {}
    running = model.get("max_model_len")
    value = plan.values.get("max_model_len")
    value = value if isinstance(value, int) and not isinstance(value, bool) else running
    if not isinstance(value, int):
        return
    p99 = _p99_prompt(ctx)
    if p99 and isinstance(running, int) and value > running:
        need = -(-int(TRAFFIC_FACTOR * p99) // STEP) * STEP
        allowed = max(running, need)
        if value > allowed:
            plan.set("max_model_len", allowed, f"{allowed} tokens: the observed p99 prompt is "
                     f"{int(p99)} tokens, so {TRAFFIC_FACTOR} x p99 (answers included) needs "
                     f"no more than the running {running}" if allowed == running else
                     f"{allowed} tokens: {TRAFFIC_FACTOR} x the observed p99 prompt of "
                     f"{int(p99)} tokens, rounded up to {STEP}", [])
            value = allowed
    native = model.get("native_context")
    if isinstance(native, int) and value > native:
        plan.set("max_model_len", native, f"{native} tokens: the model's native context "
                 "(longer requests degrade or are refused)", [])
        value = native
    same_layout = plan.tp == (ctx["flags"].get("tensor_parallel_size") or 1) and \
        plan.values.get("gpu_memory_utilization") == ctx["flags"].get("gpu_memory_utilization")
    longest = model.get("longest_request_tokens")
    if model.get("kv_pool_source") == "engine" and same_layout and longest \
            and longest < UNBOUNDED and value > longest:
        cap = cap_for_length(model)
        if cap:
            plan.set("max_model_len", cap, f"{cap} tokens: the engine's pool holds one request "
                     f"of at most {longest} tokens ({model.get('longest_request_source')}), "
                     "minus 5 %", ["https://github.com/vllm-project/vllm/issues/39734"])
