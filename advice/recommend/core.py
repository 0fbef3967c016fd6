"""Recommended configuration per server: orchestration and the vLLM version search.

``recommend_server(server, report, history, workload, kb)`` returns the full answer for one
server (see :func:`advice.recommend.output.server_result` for the keys);
``recommend_report(report, history, workload, kb)`` returns ``{"servers": [...]}``.

Flow: context of the running server -> workload profile -> the GPUs the server holds ->
a plan that starts from the current argv -> (Gemma 4 31B / 26B-A4B with known geometry and
GPU memory) the seed operating point, trying speculators best-first -> the version search:
the newest release the knowledge base knows at which the plan, evaluated as if it ran on
this host, raises nothing above medium (other models: the current release when it is clean)
-> repairs keyed by rule id between evaluations.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from packaging.version import Version

from advice.recommend import asif, audit, gemma, output, repairs, sizing, steer
from advice.recommend.plan import Plan
from advice.recommend.workload import infer_workload
from audit.kb.context import build_context
from audit.kb.engine import SEVERITY_RANK, FindingResult, KnowledgeBase, load_rules
from audit.kb.flags import parse_argv
from audit.kb.gpus import describe, server_gpus
from audit.kb.versions import RELEASE_TIMELINE, version_tuple

MAX_REPAIR_ROUNDS = 6
#: The model token of a command whose report left the model out (shown, never guessed).
MODEL_PLACEHOLDER = "<MODEL>"
_OPERATING_POINT_FAMILIES = ("gemma4-31b", "gemma4-26b-a4b")


@dataclass
class Outcome:
    """Result of the version search for one plan."""

    plan: Plan
    findings: list[FindingResult] = field(default_factory=list)
    contexts: list[dict[str, Any]] = field(default_factory=list)
    clean: bool = False
    #: findings at medium or above the command still raises, each with why it remains
    #: (advice.recommend.audit); ``unexplained`` ones keep ``clean`` False.
    explained: list[dict[str, Any]] = field(default_factory=list)
    unexplained: list[FindingResult] = field(default_factory=list)

    @property
    def above_medium(self) -> bool:
        """Whether a finding above medium remains (explained or not)."""
        return bool(asif.blocking(self.findings))


_KB: KnowledgeBase | None = None


def default_kb() -> KnowledgeBase:
    """The rules knowledge base (audit/rules), loaded once per process."""
    global _KB  # noqa: PLW0603 - a per-process cache of immutable rules
    if _KB is None:
        _KB = load_rules()
    return _KB


def candidate_versions(kb: KnowledgeBase, current: str | None, newest_first: bool) -> list[str]:
    """Releases the KB knows (versions timeline, <= verified_through), in search order.

    ``newest_first`` (Gemma 4: the knowledge base's ceiling): newest to oldest. Otherwise
    the current release first, then newer ones newest first, then older ones.
    """
    ceiling = version_tuple(kb.verified_through)
    known = [v for v, _, _ in RELEASE_TIMELINE if ceiling is None or Version(v) <= ceiling]
    known.sort(key=Version, reverse=True)
    cur = version_tuple(current)
    if newest_first or cur is None:
        return known
    newer = [v for v in known if Version(v) > cur]
    older = [v for v in known if Version(v) < cur]
    return [current] + newer + older


def search_version(plan: Plan, report: dict, server: dict, kb: KnowledgeBase,
                   versions: list[str], env: dict[str, Any]) -> Outcome:
    """The first version of ``versions`` where the repaired plan raises nothing above
    medium and every medium finding left is explained (advice.recommend.audit); else the
    first where every finding at medium or above left is explained; else the attempt with
    the fewest blocking findings (``clean`` False)."""
    best: Outcome | None = None
    tried: dict[tuple[str, bool], Outcome] = {}
    for strict in (True, False):
        for drop_spec in (False, True):
            for version in versions:
                key = (version, drop_spec)
                if key not in tried:
                    tried[key] = _try_version(plan, version, report, server, kb, env, drop_spec)
                outcome = tried[key]
                if outcome.clean and (not strict or not outcome.above_medium):
                    return outcome
                if best is None or _worse(best, outcome):
                    best = outcome
    return best or Outcome(plan)


def _worse(a: Outcome, b: Outcome) -> bool:
    """Whether ``a`` is a worse failed attempt than ``b``."""
    rank = lambda o: sorted(SEVERITY_RANK[f.severity] for f in o.unexplained)  # noqa: E731
    return (len(rank(a)), [-r for r in rank(a)]) > (len(rank(b)), [-r for r in rank(b)])


def _try_version(plan: Plan, version: str, report: dict, server: dict, kb: KnowledgeBase,
                 env: dict[str, Any], drop_spec: bool) -> Outcome:
    trial = plan.clone()
    trial.version = version
    findings, ctxs = asif.evaluate(trial, report, server, kb)
    for _ in range(MAX_REPAIR_ROUNDS):
        blocking = asif.blocking(findings)
        if not blocking or not repairs.repair(trial, ctxs[0], blocking, env, drop_spec):
            break
        findings, ctxs = asif.evaluate(trial, report, server, kb)
    return audited(trial, findings, ctxs, report, server, kb, env)


def audited(plan: Plan, findings: list[FindingResult], ctxs: list[dict], report: dict,
            server: dict, kb: KnowledgeBase, env: dict[str, Any]) -> Outcome:
    """The outcome of ``plan`` after the audit: medium repairs, then every finding at
    medium or above explained or not (advice.recommend.audit)."""
    plan, findings, ctxs = audit.repair_medium(plan, findings, ctxs, report, server, kb, env)
    explained, unexplained = audit.sort_findings(plan, findings, ctxs[0], kb, env)
    return Outcome(plan, findings, ctxs, clean=not unexplained, explained=explained,
                   unexplained=unexplained)


def base_plan(server: dict[str, Any], ctx: dict[str, Any],
              gpus: list[dict[str, Any]]) -> Plan:
    """Plan = the current argv as it stands (one replica on the server's GPUs), read with
    the running release's table (a spelling can mean another setting in another release:
    ``--disable-log-requests`` is its own switch up to 0.11, the off form of
    ``--enable-log-requests`` in 0.33)."""
    parsed = parse_argv(server.get("argv") or [], ctx["vllm"].get("table_release"))
    values = {k: v for k, v in parsed.values.items() if k not in ("model", "config")}
    model = parsed.values.get("model") or ctx["model"].get("id")
    if not model:
        model = MODEL_PLACEHOLDER
        plan_note = ("The report does not name the model (its argv has a placeholder): the "
                     f"command shows {MODEL_PLACEHOLDER}; put the model's id or path there. "
                     "Sizing and model-specific checks could not run.")
    else:
        plan_note = None
    plan = Plan(model=model, values=values,
                unknown=list(parsed.unknown), groups=[list(gpus)],
                version=ctx["vllm"].get("version"), template=server.get("chat_template"))
    if plan_note:
        plan.notes.append(plan_note)
    secrets = sorted(k for k, v in parsed.values.items()
                     if v == "REDACTED" or (isinstance(v, list) and "REDACTED" in v))
    if secrets:
        plan.notes.append("The agent redacted " + ", ".join(
            "--" + k.replace("_", "-") for k in secrets) + ": the command shows REDACTED; "
            "put the real value (or its environment variable) back.")
    for key in parsed.placeholders:
        if key != "model":
            plan.values.pop(key, None)
            plan.notes.append(f"--{key.replace('_', '-')} had no value in the report "
                              "(a placeholder); it is left out: add it back by hand.")
    return plan


def _refusal(ctx: dict[str, Any], gpus: list[dict]) -> str | None:
    """Why no command can be recommended for this server at all, or None."""
    meta = ctx["flags_meta"]
    if not meta.get("is_server", True):
        return "this process is not a vLLM server (vllm bench)"
    if not gpus:
        return "the report names no GPU for this server"
    return None


def _foreign(gpus: list[dict]) -> str | None:
    """The vendor of a non-NVIDIA accelerator (its sizing tables are NVIDIA's), else None."""
    vendor = describe(gpus[0]).get("vendor")
    return vendor if vendor not in ("nvidia", None) else None


def recommend_server(server: dict[str, Any], report: dict[str, Any],
                     history: list[dict[str, Any]] | None = None,
                     workload: str | None = None,
                     kb: KnowledgeBase | None = None) -> dict[str, Any]:
    """Recommended configuration for one ``report["servers"]`` element (see
    :func:`advice.recommend.output.server_result` for the shape). Raises ``ValueError`` for
    an unknown ``workload``."""
    kb = kb or default_kb()
    ctx = build_context(server, report, history)
    profile = infer_workload(ctx, workload)
    tp_pp = (ctx["flags"].get("tensor_parallel_size") or 1) * \
        (ctx["flags"].get("pipeline_parallel_size") or 1)
    gpus = server_gpus(report.get("gpus") or [], server.get("gpu_uuids"), tp_pp)
    refusal = _refusal(ctx, gpus)
    if refusal:
        return output.refused(server, ctx, profile, refusal)
    env = {"gpus": gpus, "live": steer.live_findings(ctx, kb)}
    plan = base_plan(server, ctx, gpus)
    foreign = _foreign(gpus)
    if ctx["model"].get("family") in _OPERATING_POINT_FAMILIES and ctx["geometry"].get("known") \
            and ctx["gpu"].get("memory_gib") and not foreign:
        return _gemma_path(plan, ctx, profile, gpus, report, server, kb, env)
    # Data-parallel + expert-parallel layouts shard experts over DP ranks; the sizing below
    # plans TP only, so such servers keep their layout.
    dp_ep = ctx["flags"].get("enable_expert_parallel") is True \
        and (ctx["flags"].get("data_parallel_size") or 1) > 1
    sized = bool(ctx["model"].get("arch", {}).get("known") and ctx["gpu"].get("memory_gib")
                 and not dp_ep and not foreign)
    cannot_size = None
    if sized:
        misfit = sizing.size_plan(plan, ctx, gpus)
        if misfit and misfit.get("provable"):
            return output.does_not_fit(server, ctx, profile, misfit)
        if misfit:
            sized, cannot_size = False, misfit["missing"]
            plan.notes.append(f"Cannot size: {cannot_size}. TP, max_model_len and "
                              "max_num_seqs are the current ones.")
    steer.steer(plan, ctx, env["live"])
    versions = candidate_versions(kb, ctx["vllm"].get("version"), newest_first=False)
    outcome = search_version(plan, report, server, kb, versions, env)
    outcome.plan.notes.insert(0, "No seed operating point exists for this model/GPU: "
                              + ("TP, max_model_len and max_num_seqs follow the memory budget "
                                 "of the model's config; other flags are kept"
                                 if sized else "the current flags are kept")
                              + " and only what the knowledge base flags at medium or above "
                              "is changed.")
    if foreign:
        outcome.plan.notes.insert(1, f"{gpus[0].get('name')} ({foreign}): the sizing tables "
                                  "(memory budget, bandwidth knee, seed recipes) are NVIDIA's, "
                                  "so the command keeps the current layout; the knowledge "
                                  "base's rules audited it.")
    result = output.server_result(server, ctx, profile, outcome, kb)
    result["cannot_size"] = cannot_size
    return result


def _gemma_path(plan: Plan, ctx: dict, profile: dict, gpus: list[dict], report: dict,
                server: dict, kb: KnowledgeBase, env: dict) -> dict[str, Any]:
    """Seed operating point, speculators best-first, newest clean release."""
    versions = candidate_versions(kb, ctx["vllm"].get("version"), newest_first=True)
    first_failure, misfit, skipped, fallback = None, None, [], None
    for spec in gemma.speculator_options(ctx):
        trial = plan.clone()
        misfit_here = gemma.apply_operating_point(trial, ctx, profile["profile"], gpus,
                                                  report, server, spec)
        if misfit_here:
            misfit = misfit_here  # the last option (no speculator) is the most favourable
            continue
        steer.steer(trial, ctx, env["live"])
        outcome = search_version(trial, report, server, kb, versions, env)
        if outcome.clean and not outcome.above_medium:
            outcome.plan.notes.extend(skipped)
            if spec is not None:
                _note_speculator_cost(outcome, plan, ctx, profile, gpus, report, server, kb,
                                      env, spec)
            return output.server_result(server, ctx, profile, outcome, kb)
        if outcome.clean:  # only explained findings above medium: kept if nothing better
            fallback = fallback or outcome
        first_failure = first_failure or outcome
        if spec is not None:
            skipped.append(f"{spec['method'].upper()} was not recommended: no release the "
                           "knowledge base knows runs it without a finding above medium ("
                           + ", ".join(f.rule_id for f in asif.blocking(outcome.findings))
                           + ").")
    if fallback is not None:
        return output.server_result(server, ctx, profile, fallback, kb)
    if first_failure is None:
        return output.does_not_fit(server, ctx, profile, misfit)
    return output.server_result(server, ctx, profile, first_failure, kb)


def _note_speculator_cost(outcome: Outcome, plan: Plan, ctx: dict, profile: dict,
                          gpus: list[dict], report: dict, server: dict, kb: KnowledgeBase,
                          env: dict, spec: dict) -> None:
    """When the speculator holds the command on an older release than the same command
    without it would get, say so and name the rules that block the newer release."""
    bare = plan.clone()
    if gemma.apply_operating_point(bare, ctx, profile["profile"], gpus, report, server, None):
        return
    versions = candidate_versions(kb, None, newest_first=True)
    alone = search_version(bare, report, server, kb, versions, env)
    newer = version_tuple(alone.plan.version)
    if not alone.clean or newer is None or newer <= version_tuple(outcome.plan.version):
        return
    blocked = outcome.plan.clone()
    blocked.version = alone.plan.version
    findings, _ = asif.evaluate(blocked, report, server, kb)
    why = ", ".join(f"{f.rule_id} ({f.severity})" for f in asif.blocking(findings))
    outcome.plan.notes.append(
        f"{spec['method'].upper()} keeps this command on vLLM {outcome.plan.version}: without "
        f"the drafter the newest clean release is {alone.plan.version}, where the drafter "
        f"raises {why or 'findings above medium'}. Drop --speculative-config to move up.")


def recommend_report(report: dict[str, Any], history: list[dict[str, Any]] | None = None,
                     workload: str | None = None,
                     kb: KnowledgeBase | None = None) -> dict[str, Any]:
    """``{"servers": [recommend_server(...) for each server]}`` for one contract report."""
    kb = kb or default_kb()
    return {"servers": [recommend_server(s, report, history, workload, kb)
                        for s in report.get("servers") or []]}
