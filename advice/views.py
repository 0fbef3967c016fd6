"""Pages for the recommended configuration and the upgrade planner.

All login-required; every value comes from the pure libraries (advice.recommend,
advice.planner) run on each server's latest stored report (``Server.last_report.raw``).

* ``host_recommend``: every running server of a host with its recommended command (copy
  button) and per-flag diff, workload override via ``?workload=``.
* ``plan_upgrade``: a target version for one server, a host, or every server running a
  model; per server the findings that appear/disappear and the verdict; pending upgrades
  ("will become X on next restart").
* ``plan_fleet``: for candidate versions, how many servers each would block or put at risk.

The planner pages read the plans the worker stored (:mod:`advice.plans`); a visit plans only
what is missing (bounded), so no visit evaluates every server once per candidate.

``server_recommendation(server)`` / ``host_recommendations(host)`` are the helpers the host
page uses with ``templates/advice/_recommendation.html``.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from advice import planner
from advice.plans import LazyPlanner, current_rows, report_entry
from advice.recommend import recommend_server
from advice.recommend.workload import PROFILES
from audit.crashloop import incident_remedy
from audit.kb.perf.calibrate import fleet
from audit.rulebook import current_knowledge_base
from fleet.models import Host, Server


def _report_entry(server: Server) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(host report, this server's entry in it) from the server's latest stored report."""
    report = server.last_report.raw if server.last_report_id else None
    entry = report_entry(server, report)
    return None if entry is None else (report, entry)


def server_recommendation(server: Server, workload: str | None = None) -> dict[str, Any] | None:
    """The recommendation dict (advice.recommend.output.server_result) for one server, or
    None when its latest report is not stored. Raises ValueError for an unknown workload."""
    found = _report_entry(server)
    if found is None:
        return None
    report, entry = found
    return recommend_server(entry, report, workload=workload)


def host_recommendations(host: Host, workload: str | None = None,
                         servers: Any = None) -> list[tuple[Server, Any]]:
    """(server, recommendation or None) for each running server of ``host`` (or for
    ``servers``, e.g. one page of them)."""
    if servers is None:
        servers = _running_on(host)
    return [(s, server_recommendation(s, workload)) for s in servers]


def _running_on(host: Host) -> Any:
    return host.servers.filter(is_running=True).select_related("last_report") \
        .order_by("identity")


#: Servers recommended per page of /hosts/<code>/recommend/: each costs a full
#: recommendation (context, memory budget, rules); a 128-server host answers in pages.
SERVERS_PER_PAGE = 16


@login_required
def host_recommend(request: HttpRequest, code: uuid.UUID) -> HttpResponse:
    """One host: each running server's recommended command and diff."""
    host = get_object_or_404(Host, code=code)
    workload = request.GET.get("workload") or None
    if workload not in PROFILES:
        workload = None
    page = Paginator(_running_on(host), SERVERS_PER_PAGE).get_page(request.GET.get("page"))
    items = host_recommendations(host, workload, page.object_list)
    # Model-vs-server calibration across the servers shown (advice.perfmodel: the spread
    # says how far one server's ratio may sit from the others').
    ratios = [((rec or {}).get("prediction") or {}).get("calibration", {}).get("ratio")
              for _, rec in items]
    return render(request, "advice/recommend_host.html", {
        "host": host, "workload": workload, "profiles": PROFILES, "page": page,
        "items": items, "calibration": fleet([r for r in ratios if r])})


def _servers_in_scope(request: HttpRequest) -> tuple[list[Server], str]:
    """Servers chosen by ``?server=<id>``, ``?host=<code>`` or ``?model=<substring>``."""
    # Without the reports (stored plans need none; LazyPlanner loads the few it needs) nor
    # the big JSON columns (last_metrics_snapshot: 160 ms of decoding for the demo's 40).
    # A slot whose restart failed is in scope too: its plan shows the failed start.
    running = Server.objects.filter(Q(is_running=True) | Q(failed_start__isnull=False)
                                    ).select_related("host").defer(
        "last_metrics_snapshot", "env", "errors", "kubernetes")
    server = request.GET.get("server", "")
    if server:
        # ASCII digits within bigint only: isdigit() let "²" reach int() (a 500)
        if not (server.isascii() and server.isdecimal()) or len(server) > 18:
            return [], "no such server"
        chosen = list(running.filter(pk=int(server)))
        return chosen, f"server {chosen[0]}" if chosen else "no such server"
    code = request.GET.get("host")
    if code:
        try:
            host = Host.objects.get(code=uuid.UUID(code))
        except (ValueError, Host.DoesNotExist):
            return [], "no such host"
        return list(running.filter(host=host)), f"host {host.hostname}"
    model = (request.GET.get("model") or "").strip()
    if model:
        needle = model.lower()
        return [s for s in running if any(needle in str(t).lower() for t in s.argv or [])], \
            f"servers running {model}"
    return list(running), "every running server"


#: Server plans per page of the upgrade planner.
PLANS_PER_PAGE = 10


def _plans(servers: list[Server], target: str | None,
           ) -> tuple[list[dict], list[dict], int]:
    """(plans for ``target``, pending-upgrade plans, servers not planned yet) for the
    servers: stored rows first (:func:`advice.plans.current_rows`), the rest planned here
    (:class:`advice.plans.LazyPlanner`, bounded)."""
    kb = current_knowledge_base()
    rows = current_rows(servers, kb.version)
    planned = dict(rows.values_list("server_id", "fingerprint").distinct())
    # A target in another spelling (v0.27.0) is planned as typed, as before (target_raw).
    stored_target = target if target and planner.normalise_target(target) == target else None
    stored: dict[tuple[int, bool], list[dict]] = {}
    wanted = Q(pending=True) | Q(pending=False, target=stored_target or "")
    for server_id, pending, plan in rows.filter(wanted).values_list("server_id", "pending",
                                                                    "plan"):
        stored.setdefault((server_id, pending), []).append(plan)
    lazy = LazyPlanner(kb, planned)
    plans, pending = [], []
    for server in servers:
        if target:
            found = stored.get((server.pk, False))
            plan = found[0] if found else lazy.plan(server, target)
            if plan is not None:
                plans.append({"server": server, **plan})
        waiting = stored.get((server.pk, True), []) if server.pk in planned else \
            lazy.pending(server)
        extra = _failed_start(server) if waiting else {}
        pending += [{"server": server, **plan, **extra} for plan in waiting or []]
    return plans, pending, len(lazy.skipped)


def _failed_start(server: Server) -> dict[str, Any]:
    """For a pending upgrade whose restart already failed: the plan says so, with the
    incident's one remedy (audit.crashloop.incident_remedy), instead of "will become X"."""
    if not server.failed_start:
        return {}
    remedy = incident_remedy(server)
    installed = server.installed_vllm_version or "the installed release"
    return {"failed_start": remedy, "verdict": "blocked",
            "label": f"restarted onto {installed} and failed to start"}


@login_required
def plan_upgrade(request: HttpRequest) -> HttpResponse:
    """Upgrade planner for one server, a host or every server running a model."""
    target = (request.GET.get("target") or "").strip() or None
    servers, scope = _servers_in_scope(request)
    error = None
    if target:
        try:
            planner.normalise_target(target)
        except ValueError as exc:
            error, target = str(exc), None
    plans, pending, unplanned = _plans(servers, target)
    # Summary first, worst first, paginated (38 hosts made an 11,858 px page).
    order = {"blocked": 0, "risky": 1, "safe": 2}
    plans = sorted(plans, key=lambda p: (order.get(p["verdict"], 3), str(p["server"])))
    summary = {v: sum(p["verdict"] == v for p in plans) for v in order}
    page = Paginator(plans, PLANS_PER_PAGE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    return render(request, "advice/recommend_plan.html", {
        "target": target, "scope": scope, "plans": page.object_list, "page": page,
        "page_qs": query.urlencode(), "summary": summary, "pending": pending, "error": error,
        "unplanned": unplanned,
        "known_versions": planner.known_versions(current_knowledge_base()),
        "hosts": Host.objects.order_by("hostname"), "query": request.GET})


@login_required
def plan_fleet(request: HttpRequest) -> HttpResponse:
    """How many servers each candidate version would block or put at risk."""
    raw = (request.GET.get("candidates") or "").replace(",", " ").split()
    error = None
    # The active KB (an installed bundle's verified_through), not the planner's built-in
    # default: the rows were stored for its releases, and loading a second KB cost 2-6 s.
    known = planner.known_versions(current_knowledge_base())
    try:
        candidates = [planner.normalise_target(c) for c in raw] or known
    except ValueError as exc:
        error, candidates = str(exc), known
    servers = list(Server.objects.filter(is_running=True)
                   .only("pk", "pid", "base_url", "last_report_id"))
    rows = fleet_rows(servers, candidates)
    return render(request, "advice/recommend_fleet.html", {
        "rows": rows, "error": error, "candidates": " ".join(raw),
        "unplanned": max((r["unplanned"] for r in rows), default=0)})


def fleet_rows(servers: list[Server], candidates: list[str]) -> list[dict[str, Any]]:
    """Per candidate (PEP 440 strings): ``{"target", "servers", "blocked", "risky", "safe",
    "breaks", "configurations", "unplanned"}`` over ``servers``, from their stored verdicts
    (one query, no report read); a server without a current row is planned here per
    configuration (bounded; ``unplanned`` counts those left for a later visit). Servers
    without a stored report are left out, as before."""
    kb = current_knowledge_base()
    verdicts: dict[tuple[int, str], str] = {}
    fingerprints: dict[int, str] = {}
    for server_id, target, word, fingerprint in (
            current_rows(servers, kb.version)
            .filter(pending=False, target__in=candidates)
            .values_list("server_id", "target", "verdict", "fingerprint")):
        verdicts[(server_id, target)] = word
        fingerprints[server_id] = fingerprint
    lazy = LazyPlanner(kb, fingerprints)
    out = []
    for target in candidates:
        counts = {"blocked": 0, "risky": 0, "safe": 0}
        configurations, unplanned = set(), 0
        for server in servers:
            word = verdicts.get((server.pk, target))
            if word is None:
                plan = lazy.plan(server, target)
                if plan is None:  # over the budget (skipped), or no stored report
                    unplanned += server.pk in lazy.skipped
                    continue
                word = plan["verdict"]
            counts[word] = counts.get(word, 0) + 1
            configurations.add(lazy.fingerprint(server))
        out.append({"target": target, "servers": sum(counts.values()), **counts,
                    "breaks": counts["blocked"], "configurations": len(configurations),
                    "unplanned": unplanned})
    return out
