"""Pages for the recommended configuration and the upgrade planner (issue 5).

All login-required; every value comes from the pure libraries (advice.recommend,
advice.planner) run on each server's latest stored report (``Server.last_report.raw``).

* ``host_recommend``: every running server of a host with its recommended command (copy
  button) and per-flag diff, workload override via ``?workload=``.
* ``plan_upgrade``: a target version for one server, a host, or every server running a
  model; per server the findings that appear/disappear and the verdict; pending upgrades
  ("will become X on next restart").
* ``plan_fleet``: for candidate versions, how many servers each would block or put at risk.

``server_recommendation(server)`` / ``host_recommendations(host)`` are the helpers the host
page uses with ``templates/advice/_recommendation.html``.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.cache import cache
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from advice import planner
from advice.recommend import recommend_server
from advice.recommend.workload import PROFILES
from fleet.models import Host, Server


def _report_entry(server: Server) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(host report, this server's entry in it) from the server's latest stored report."""
    report = server.last_report.raw if server.last_report_id else None
    if not isinstance(report, dict):
        return None
    for entry in report.get("servers") or []:
        if (server.base_url and entry.get("base_url") == server.base_url) or \
                entry.get("pid") == server.pid:
            return report, entry
    return None


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
    return render(request, "advice/recommend_host.html", {
        "host": host, "workload": workload, "profiles": PROFILES, "page": page,
        "items": host_recommendations(host, workload, page.object_list)})


def _servers_in_scope(request: HttpRequest) -> tuple[list[Server], str]:
    """Servers chosen by ``?server=<id>``, ``?host=<code>`` or ``?model=<substring>``."""
    running = Server.objects.filter(is_running=True).select_related("host", "last_report")
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

#: Seconds a planner answer is reused. The key holds the KB version and every server's latest
#: report id, so a new report or rule change is a new key; the timeout only bounds memory.
PLAN_CACHE_S = 600


def _cached(kind: str, servers: list[Server], extra: Any, compute: Any) -> Any:
    """``compute()`` memoised in Django's cache on (kind, KB version, servers' latest
    reports, extra): a planner page evaluates every server once per candidate (4.7 s for
    the demo's 38 hosts, issue 13.10); a repeat visit with nothing new reads the answer."""
    import hashlib

    from django.core.cache import cache

    from audit.rulebook import current_knowledge_base

    parts = [kind, current_knowledge_base().version, repr(extra),
             *(f"{s.pk}:{s.last_report_id}" for s in sorted(servers, key=lambda s: s.pk))]
    key = "plan:" + hashlib.sha256("|".join(parts).encode()).hexdigest()
    found = cache.get(key)
    if found is None:
        found = compute()
        cache.set(key, found, PLAN_CACHE_S)
    return found


def _plans(servers: list[Server], target: str | None) -> tuple[list[dict], list[dict]]:
    """(plans for ``target``, pending-upgrade plans) for the servers."""
    plans, pending = [], []
    for server in servers:
        found = _report_entry(server)
        if found is None:
            continue
        report, entry = found
        if target:
            plans.append({"server": server, **planner.plan_server(entry, report, target)})
        for plan in planner.pending_upgrades({**report, "servers": [entry]}):
            pending.append({"server": server, **plan})
    return plans, pending


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
    plans, pending = _cached("upgrade", servers, target, lambda: _plans(servers, target))
    # Summary first, worst first, paginated (issue 13.10: 38 hosts made an 11,858 px page).
    order = {"blocked": 0, "risky": 1, "safe": 2}
    plans = sorted(plans, key=lambda p: (order.get(p["verdict"], 3), str(p["server"])))
    summary = {v: sum(p["verdict"] == v for p in plans) for v in order}
    page = Paginator(plans, PLANS_PER_PAGE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    return render(request, "advice/recommend_plan.html", {
        "target": target, "scope": scope, "plans": page.object_list, "page": page,
        "page_qs": query.urlencode(), "summary": summary, "pending": pending, "error": error,
        "known_versions": planner.known_versions(), "hosts": Host.objects.order_by("hostname"),
        "query": request.GET})


@login_required
def plan_fleet(request: HttpRequest) -> HttpResponse:
    """How many servers each candidate version would block or put at risk."""
    raw = (request.GET.get("candidates") or "").replace(",", " ").split()
    error = None
    try:
        candidates = [planner.normalise_target(c) for c in raw] or planner.known_versions()
    except ValueError as exc:
        error, candidates = str(exc), planner.known_versions()
    running = Server.objects.filter(is_running=True)
    servers = list(running.only("pk", "last_report_id"))  # the cache key, without reports
    # Two levels: a repeat visit with no new report reads the rows (key: servers' latest
    # reports); a new report re-plans only distinct configurations (fleet_rows).
    rows = _cached("fleet", servers, candidates, lambda: fleet_rows(candidates))
    return render(request, "advice/recommend_fleet.html", {
        "rows": rows, "error": error, "candidates": " ".join(raw)})


#: Seconds a fleet upgrade view stays cached; any new report, server or KB changes its key
#: first (the key is the fleet's configurations and the KB version), this only bounds memory.
FLEET_PLAN_CACHE_S = 3600


def fleet_rows(candidates: list[str]) -> list[dict[str, Any]]:
    """:func:`advice.planner.plan_fleet` rows (without the per-server plans) for every
    running server, cached per KB version + fleet fingerprint (the sorted configuration
    fingerprints of the running servers) + candidates: the page costs one pass over the
    latest reports when nothing changed, and configurations x candidates rule evaluations
    when something did (issue 16: 344 servers x 13 versions took 40 s uncached)."""
    reports = []
    for server in Server.objects.filter(is_running=True).select_related("last_report"):
        found = _report_entry(server)
        if found:
            reports.append({**found[0], "servers": [found[1]]})
    fingerprints = sorted(planner.server_fingerprint(r["servers"][0], r) for r in reports)
    digest = hashlib.sha256(json.dumps([planner.active_kb_version(), candidates,
                                        fingerprints]).encode()).hexdigest()
    key = f"advice:plan-fleet:{digest}"
    rows = cache.get(key)
    if rows is None:
        fleet = planner.plan_fleet(reports, candidates)
        rows = [{k: v for k, v in row.items() if k != "plans"} for row in fleet["candidates"]]
        cache.set(key, rows, FLEET_PLAN_CACHE_S)
    return rows
