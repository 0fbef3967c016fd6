"""Upgrade planner: what a vLLM version change would do to each server (issue 5).

Pure Python (no Django). For one server, the latest report is evaluated twice with the
rules knowledge base: as it runs, and as if it ran the target release (the server entry's
``vllm_version``/``installed_vllm_version`` replaced by the target, normalised with
:mod:`audit.kb.versions`, so version-dependent defaults follow too). The difference is the
plan: findings that appear, disappear or change severity, and a verdict:

* ``blocked`` — a critical finding appears (or rises to critical);
* ``risky`` — a high or medium finding appears or rises, or the target is newer than the
  release the knowledge base was verified through; the reasons list each, with the
  upstream issues the findings cite;
* ``safe`` — nothing above low appears.

Pending upgrades (installed version != running) are planned with the installed version as
the target and labelled "will become X on next restart". :func:`plan_fleet` counts, for
candidate versions, how many servers each would block or put at risk.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from packaging.version import Version

from audit.kb.context import build_context
from audit.kb.engine import SEVERITY_RANK, FindingResult, KnowledgeBase, load_rules
from audit.kb.versions import RELEASE_TIMELINE, parse_version, version_tuple

_ISSUE_RE = re.compile(r"^https://github\.com/[\w.-]+/[\w.-]+/issues/\d+$")
_KB: KnowledgeBase | None = None


def _kb(kb: KnowledgeBase | None) -> KnowledgeBase:
    global _KB  # noqa: PLW0603 - per-process cache of immutable rules
    if kb is not None:
        return kb
    if _KB is None:
        _KB = load_rules()
    return _KB


def known_versions(kb: KnowledgeBase | None = None) -> list[str]:
    """Releases the knowledge base knows (versions timeline + verified_through), newest first."""
    found = {v for v, _, _ in RELEASE_TIMELINE}
    verified = _kb(kb).verified_through
    if verified:
        found.add(verified)
    return sorted(found, key=Version, reverse=True)


def normalise_target(target: str) -> str:
    """PEP 440 form of ``target`` (``v0.27.0``, ``vllm/vllm-openai:v0.27.0``, ``0.29.1rc1``…).
    Raises ``ValueError`` when it names no version."""
    info = parse_version(target)
    if info.version is None:
        raise ValueError(f"not a vLLM version: {target!r} ({info.note})")
    return info.version


def _as_if(server: dict[str, Any], target: str) -> dict[str, Any]:
    clone = copy.deepcopy(server)
    clone["vllm_version"] = target
    clone["installed_vllm_version"] = target
    return clone


def _finding_dict(f: FindingResult) -> dict[str, Any]:
    return {"rule_id": f.rule_id, "severity": f.severity, "title": f.title,
            "message": f.message, "references": list(f.references)}


def compare(before: list[FindingResult], after: list[FindingResult]) -> dict[str, list]:
    """Split two finding lists by rule id: ``appear``, ``disappear``, ``escalate`` (same rule,
    higher severity after), ``deescalate``, ``unchanged``."""
    old = {f.rule_id: f for f in before}
    new = {f.rule_id: f for f in after}
    out: dict[str, list] = {k: [] for k in ("appear", "disappear", "escalate",
                                            "deescalate", "unchanged")}
    for rule_id, f in new.items():
        if rule_id not in old:
            out["appear"].append(_finding_dict(f))
            continue
        was, now = SEVERITY_RANK[old[rule_id].severity], SEVERITY_RANK[f.severity]
        key = "escalate" if now < was else "deescalate" if now > was else "unchanged"
        out[key].append({**_finding_dict(f), "was": old[rule_id].severity})
    out["disappear"] = [_finding_dict(f) for rid, f in old.items() if rid not in new]
    return out


def verdict(changes: dict[str, list], target: str, kb: KnowledgeBase) -> dict[str, Any]:
    """``{"verdict": safe|risky|blocked, "reasons": [...], "upstream_issues": [...]}``."""
    worse = changes["appear"] + changes["escalate"]
    reasons, issues = [], []
    for f in sorted(worse, key=lambda f: SEVERITY_RANK[f["severity"]]):
        if f["severity"] in ("critical", "high", "medium"):
            reasons.append(f"{f['severity']}: {f['title']} ({f['rule_id']})")
            issues += [r for r in f["references"] if _ISSUE_RE.match(r)]
    ceiling = version_tuple(kb.verified_through)
    if ceiling is not None and version_tuple(target) and version_tuple(target) > ceiling:
        reasons.append(f"{target} is newer than the release the knowledge base was verified "
                       f"through ({kb.verified_through}): rules may be silent because nobody "
                       "checked it yet")
    if any(f["severity"] == "critical" for f in worse):
        word = "blocked"
    elif reasons:
        word = "risky"
    else:
        word = "safe"
    return {"verdict": word, "reasons": reasons, "upstream_issues": list(dict.fromkeys(issues))}


def plan_server(server: dict[str, Any], report: dict[str, Any], target: str,
                history: list[dict[str, Any]] | None = None,
                kb: KnowledgeBase | None = None, label: str | None = None,
                current: tuple[dict, list[FindingResult]] | None = None) -> dict[str, Any]:
    """Plan one server's move to ``target`` (any PEP 440 / tag form); ``current`` is the
    server's (context, findings) today when the caller already has them (plan_fleet reuses
    them across candidates instead of evaluating the same report once per candidate).

    Returns ``{"pid", "base_url", "model", "current", "target", "target_raw", "label",
    "verdict", "reasons", "upstream_issues", "appear", "disappear", "escalate",
    "deescalate", "unchanged", "refused_flags"}`` (``refused_flags``: options the target
    release refuses, from its table). Raises ``ValueError`` for a target that names no version.
    """
    kb = _kb(kb)
    normalised = normalise_target(target)
    now, before = current or _current(server, report, history, kb)
    then = build_context(_as_if(server, target), report, history)
    then["vllm"].update(version=normalised, version_raw=target)
    changes = compare(before, list(kb.evaluate(then)))
    return {"pid": server.get("pid"), "base_url": server.get("base_url"),
            "model": now["flags"].get("model"), "current": now["vllm"].get("version"),
            "target": normalised, "target_raw": target,
            # Options the target's table refuses (vLLM exits "unrecognized arguments").
            "refused_flags": then["flags_meta"].get("not_accepted") or [],
            "label": label or f"upgrade to {normalised}",
            **verdict(changes, normalised, kb), **changes}


def _current(server: dict[str, Any], report: dict[str, Any], history: list[dict] | None,
             kb: KnowledgeBase) -> tuple[dict, list[FindingResult]]:
    now = build_context(server, report, history)
    return now, list(kb.evaluate(now))


def plan_report(report: dict[str, Any], target: str, history: list[dict] | None = None,
                kb: KnowledgeBase | None = None, model: str | None = None) -> list[dict]:
    """:func:`plan_server` for every server of a host report (optionally only those whose
    model id contains ``model``, case-insensitive)."""
    return [plan_server(s, report, target, history, kb) for s in select(report, model)]


def select(report: dict[str, Any], model: str | None = None) -> list[dict[str, Any]]:
    """Servers of ``report`` whose argv names ``model`` (substring, case-insensitive)."""
    servers = report.get("servers") or []
    if not model:
        return list(servers)
    needle = model.lower()
    return [s for s in servers if any(needle in str(t).lower() for t in s.get("argv") or [])]


def pending_upgrades(report: dict[str, Any], history: list[dict] | None = None,
                     kb: KnowledgeBase | None = None) -> list[dict[str, Any]]:
    """Plans for servers whose installed vLLM differs from the running one, labelled
    "will become X on next restart"."""
    out = []
    for server in report.get("servers") or []:
        ctx = build_context(server, report, history)
        installed = ctx["vllm"].get("installed")
        if ctx["vllm"].get("pending_upgrade") and installed:
            raw = server.get("installed_vllm_version") or installed
            out.append(plan_server(server, report, raw, history, kb,
                                   label=f"will become {installed} on next restart"))
    return out


def plan_fleet(reports: list[dict[str, Any]], targets: list[str] | None = None,
               kb: KnowledgeBase | None = None) -> dict[str, Any]:
    """For each candidate version (default: every release the KB knows), how many servers
    it would block or put at risk. Returns ``{"candidates": [{"target", "servers",
    "blocked", "risky", "safe", "breaks", "plans"}]}`` where ``breaks`` = blocked."""
    kb = _kb(kb)
    pairs = [(s, r) for r in reports for s in r.get("servers") or []]
    today = [_current(s, r, None, kb) for s, r in pairs]
    out = []
    for target in targets or known_versions(kb):
        plans = [plan_server(s, r, target, None, kb, current=now)
                 for (s, r), now in zip(pairs, today, strict=True)]
        counts = {w: sum(p["verdict"] == w for p in plans) for w in ("blocked", "risky", "safe")}
        out.append({"target": normalise_target(target), "servers": len(plans), **counts,
                    "breaks": counts["blocked"], "plans": plans})
    return {"candidates": out}
