"""Upgrade planner: what a vLLM version change would do to each server.

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
import hashlib
import json
import re
from typing import Any

from packaging.version import Version

from advice.perfmodel.releases import release_change
from audit.kb.context import build_context
from audit.kb.engine import SEVERITY_RANK, FindingResult, KnowledgeBase, load_rules
from audit.kb.fixes import lacking, server_features
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


def current_findings(server: dict[str, Any], report: dict[str, Any],
                     history: list[dict[str, Any]] | None = None,
                     kb: KnowledgeBase | None = None,
                     ) -> tuple[dict[str, Any], list[FindingResult]]:
    """(context, findings) of ``server`` as it runs now; the same for every target, so
    :func:`plan_fleet` computes it once per server instead of once per candidate."""
    now = build_context(server, report, history)
    return now, list(_kb(kb).evaluate(now))


def plan_server(server: dict[str, Any], report: dict[str, Any], target: str,
                history: list[dict[str, Any]] | None = None,
                kb: KnowledgeBase | None = None, label: str | None = None,
                now: tuple[dict[str, Any], list[FindingResult]] | None = None,
                ) -> dict[str, Any]:
    """Plan one server's move to ``target`` (any PEP 440 / tag form).

    Returns ``{"pid", "base_url", "model", "current", "target", "target_raw", "label",
    "verdict", "reasons", "upstream_issues", "appear", "disappear", "escalate",
    "deescalate", "unchanged", "refused_flags", "brings_fixes", "performance"}``
    (``refused_flags``: options the target release refuses, from its table;
    ``brings_fixes``: :func:`brings_fixes`; ``performance``: the predicted change at this
    server's load where kernel data has both releases,
    :func:`advice.perfmodel.releases.release_change`). ``now``: :func:`current_findings` of
    this server when the caller already has it. Raises ``ValueError`` for a target that
    names no version.
    """
    kb = _kb(kb)
    normalised = normalise_target(target)
    now_ctx, before = now or current_findings(server, report, history, kb)
    then = build_context(_as_if(server, target), report, history)
    then["vllm"].update(version=normalised, version_raw=target)
    # The upgraded server has not been seen serving: its start-up findings stand.
    then["server"] = {**then["server"], "serving": False, "serving_evidence": []}
    changes = compare(before, list(kb.evaluate(then)))
    return {"pid": server.get("pid"), "base_url": server.get("base_url"),
            "brings_fixes": brings_fixes(now_ctx, normalised),
            "model": now_ctx["flags"].get("model"), "current": now_ctx["vllm"].get("version"),
            "target": normalised, "target_raw": target,
            # Options the target's table refuses (vLLM exits "unrecognized arguments").
            "refused_flags": then["flags_meta"].get("not_accepted") or [],
            "label": label or f"upgrade to {normalised}",
            "performance": release_change(now_ctx, normalised),
            **verdict(changes, normalised, kb), **changes}


def brings_fixes(now_ctx: dict[str, Any], target: str) -> list[dict[str, Any]]:
    """Fixes from the shipped index (:mod:`audit.kb.fixes`) the move to ``target`` brings
    for what this server runs: [{number, title, url, first_release, touches}], closest
    first; the same matching as the cap-fixes-you-lack finding."""
    release = now_ctx["vllm"].get("table_release")
    if not release:
        return []
    model, flags = now_ctx["model"], now_ctx["flags"]
    server = server_features(
        release=release, arch=model["arch"], flags=flags, gpu=now_ctx["gpu"],
        quantization=flags.get("quantization") or model["arch"].get("quant_method"),
        spec_method=(model.get("speculative") or {}).get("raw_method"))
    return lacking(release, server, upto=target, limit=0)


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


#: Server fields that name a process, not its configuration: two servers differing only
#: here get the same plan (:func:`server_fingerprint`). ``metrics`` too: the fleet view
#: plans one representative of each configuration, not each server's live counters.
_IDENTITY_FIELDS = frozenset({"pid", "started_at", "base_url", "port", "listen_ports",
                              "errors", "gpu_uuids", "metrics", "cwd", "discovered",
                              "kubernetes"})
#: GPU fields that describe the hardware (readings such as memory used are left out).
_GPU_SPEC_FIELDS = ("name", "memory_total_bytes", "compute_capability", "driver_version",
                    "cuda_version", "gfx_arch")
_HOST_IDENTITY_FIELDS = frozenset({"hostname", "machine_id", "labels"})
#: Options that only say where a server listens: left out of the fingerprint's argv.
_ADDRESS_FLAGS = frozenset({"--port", "--host", "--uds"})


def _argv_shape(argv: Any) -> list[Any]:
    """``argv`` without the values of :data:`_ADDRESS_FLAGS` (``--port 8001``, ``--host=x``)."""
    if not isinstance(argv, list):
        return []
    out: list[Any] = []
    skip = False
    for word in argv:
        if skip:
            skip = False
            continue
        flag = word.split("=", 1)[0] if isinstance(word, str) else word
        if flag in _ADDRESS_FLAGS:
            skip = isinstance(word, str) and "=" not in word
            continue
        out.append(word)
    return out


def server_fingerprint(server: dict[str, Any], report: dict[str, Any]) -> str:
    """sha256 of what a plan depends on: the server's model, version and configuration
    (argv without its address options, env, model files, template), the specs of its GPUs
    and the host's software; not its pid, address, GPU uuids, live metrics or host name."""
    uuids = set(server.get("gpu_uuids") or [])
    gpus = [{k: g.get(k) for k in _GPU_SPEC_FIELDS} for g in report.get("gpus") or []
            if isinstance(g, dict) and (not uuids or g.get("uuid") in uuids)]
    host = report.get("host") if isinstance(report.get("host"), dict) else {}
    config = {k: v for k, v in server.items() if k not in _IDENTITY_FIELDS}
    config["argv"] = _argv_shape(server.get("argv"))
    key = {"server": config,
           "gpus": gpus,
           "host": {k: v for k, v in host.items() if k not in _HOST_IDENTITY_FIELDS}}
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()


def plan_fleet(reports: list[dict[str, Any]], targets: list[str] | None = None,
               kb: KnowledgeBase | None = None) -> dict[str, Any]:
    """For each candidate version (default: every release the KB knows), how many servers
    it would block or put at risk. Returns ``{"candidates": [{"target", "servers",
    "blocked", "risky", "safe", "breaks", "plans", "configurations"}]}`` where ``breaks`` =
    blocked and ``plans`` has one plan per server (servers of one configuration share it).

    Servers with the same :func:`server_fingerprint` are planned once (a fleet of 344
    servers is typically a few dozen configurations), and each configuration's current
    findings once for all targets: configurations x (targets + 1) rule evaluations instead
    of servers x targets x 2.
    """
    kb = _kb(kb)
    groups: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]] = {}
    for report in reports:
        for server in report.get("servers") or []:
            groups.setdefault(server_fingerprint(server, report), []).append((server, report))
    current = {key: current_findings(members[0][0], members[0][1], None, kb)
               for key, members in groups.items()}
    out = []
    for target in targets or known_versions(kb):
        plans = []
        for key, members in groups.items():
            server, report = members[0]
            plan = plan_server(server, report, target, None, kb, now=current[key])
            plans.extend([plan] * len(members))
        counts = {w: sum(p["verdict"] == w for p in plans) for w in ("blocked", "risky", "safe")}
        out.append({"target": normalise_target(target), "servers": len(plans), **counts,
                    "breaks": counts["blocked"], "plans": plans,
                    "configurations": len(groups)})
    return {"candidates": out}
