"""Stored upgrade plans: each server's verdict per candidate release, made by the worker.

Write side (the worker): :func:`advice.tasks.on_findings_evaluated` receives
:data:`audit.signals.findings_evaluated` after a report's evaluation committed and queues
:func:`advice.tasks.store_server_plans` (findings never wait for plans): :func:`store_plans`,
for the servers whose config rules ran (their audit config fingerprint changed: version, installed
version, argv, env, model files, template, GPUs, live probes, KB version), stores one
:class:`advice.models.ServerPlan` per release the knowledge base knows, plus the pending
upgrade's plan. Nothing is planned in the nothing-due path or per metrics sample. A server
whose planner fingerprint and KB did not change (a bare restart), or that has the same
configuration as an already planned server, copies those plans instead of evaluating.

Read side (the pages): :func:`current_rows` are the rows whose config fingerprint is the
server's last evaluated one under the active KB; a KB change (bundle installed, rules
edited) or a config change makes every older row invisible at once. What is missing (a
server never evaluated, a target outside the known releases, the moment between an
evaluation and its planning) is planned on the visit, per configuration, memoised in
Django's cache, at most :data:`LAZY_CONFIGURATIONS` configurations and about
:data:`LAZY_SECONDS` per visit; the page counts the rest as "not planned yet". A GET
writes no row (page writes met the simulator's and SQLite answered "database
is locked").
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from django.core.cache import cache
from django.db import transaction
from django.db.models import F, QuerySet

from advice import planner
from advice.models import ServerPlan
from audit.evaluation import config_fingerprint
from audit.kb.engine import KnowledgeBase
from audit.rulebook import current_knowledge_base
from fleet.models import Report, Server

#: Configurations a page visit may plan itself: each costs two contexts and two rule
#: evaluations per target, 15-30 ms of CPU on the 2-core test machine (bench/demo_pages.py:
#: the demo's 37 configurations took 470-670 ms for one target before plans were stored).
LAZY_CONFIGURATIONS = 12
#: Seconds after which a visit starts planning no further configuration (the first one is
#: always planned), so a page stays near the 300 ms target on a loaded machine too.
LAZY_SECONDS = 0.2
#: Seconds a lazily made plan is reused; its key holds the KB version, the configuration's
#: fingerprint and the target, so the timeout only bounds memory.
LAZY_CACHE_S = 3600


def report_entry(server: Server, report: dict[str, Any] | None) -> dict[str, Any] | None:
    """This server's entry in a host report (same base_url, else same pid), or None."""
    if not isinstance(report, dict):
        return None
    for entry in report.get("servers") or []:
        if not isinstance(entry, dict):
            continue
        if (server.base_url and entry.get("base_url") == server.base_url) or \
                entry.get("pid") == server.pid:
            return entry
    return None


# --- write side (worker) ------------------------------------------------------------------

def plan_targets(kb: KnowledgeBase) -> list[str]:
    """Releases every server is planned for: those the knowledge base knows
    (:func:`advice.planner.known_versions`: the release timeline and ``verified_through``),
    the list the planner pages offer and the fleet view compares by default. A target
    typed by hand (e.g. ``0.27.0``, no timeline release) is planned on the visit. Not the
    versions the fleet runs: the demo fleet alone runs 36 (dev builds, 0.6.3...), which
    would near triple the work per configuration change."""
    return planner.known_versions(kb)


def store_plans(report_id: str, server_ids: Iterable[int],
                kb: KnowledgeBase | None = None) -> int:
    """Store the plans of ``server_ids`` from their entries in report ``report_id`` (one
    row per :func:`plan_targets` release, plus the pending upgrade), then plan targets the
    servers already planned lack (:func:`fill_targets`: a release added to the timeline).
    Returns how many configurations were evaluated (0 when every server reused plans)."""
    kb = kb or current_knowledge_base()
    report = Report.objects.filter(report_id=report_id).first()
    raw = report.raw if report is not None else None
    if not isinstance(raw, dict):
        return 0
    targets = plan_targets(kb)
    evaluated = 0
    for server in Server.objects.filter(pk__in=list(server_ids)):
        entry = report_entry(server, raw)
        if entry is None:
            continue
        fingerprint = planner.server_fingerprint(entry, raw)
        plans = _reusable(fingerprint, kb.version, targets)
        if plans is None:
            plans = _plan_all(entry, raw, targets, kb)
            evaluated += 1
        rows = [ServerPlan(server=server, target=plan["target"], pending=pending,
                           verdict=plan["verdict"], fingerprint=fingerprint,
                           plan={**plan, "pid": entry.get("pid"),
                                 "base_url": entry.get("base_url")},
                           config_fingerprint=config_fingerprint(
                               entry, raw.get("gpus") or [], kb.version),
                           kb_version=kb.version)
                for pending, plan in plans]
        with transaction.atomic():
            # Two reports of one host planned at once: one replaces the other's rows whole.
            Server.objects.select_for_update().filter(pk=server.pk).first()
            ServerPlan.objects.filter(server=server).delete()
            ServerPlan.objects.bulk_create(rows, ignore_conflicts=True)
    global _filled_for
    if _filled_for != (kb.version, tuple(targets)):
        evaluated += fill_targets(targets, kb)
        _filled_for = (kb.version, tuple(targets))
    return evaluated


#: (KB version, targets) this process last filled the fleet for. Every plan stored since
#: carries all those targets, so the fleet-wide read of :func:`fill_targets` (every running
#: server's rows) runs once per process and target list, not on each configuration change.
_filled_for: tuple[str, tuple[str, ...]] | None = None


def fill_targets(targets: list[str], kb: KnowledgeBase) -> int:
    """Plan ``targets`` missing from running servers' current rows (a release the timeline
    gained with a new version of this code), once per configuration, from a server whose
    latest report still has that configuration. Returns the configurations evaluated; one
    query when nothing is missing."""
    running = Server.objects.filter(is_running=True)
    have: dict[int, set[str]] = {}
    about: dict[int, tuple[str, str]] = {}
    for server_id, target, fingerprint, config in (
            current_rows(running, kb.version)
            .filter(pending=False)
            .values_list("server_id", "target", "fingerprint", "config_fingerprint")):
        have.setdefault(server_id, set()).add(target)
        about[server_id] = (fingerprint, config)
    groups: dict[str, list[int]] = {}
    for server_id, done in have.items():
        if set(targets) - done:
            groups.setdefault(about[server_id][0], []).append(server_id)
    evaluated = 0
    for fingerprint, members in groups.items():
        found = _entry_with(members, fingerprint)
        if found is None:
            continue  # its next config evaluation plans it; pages plan it meanwhile
        entry, raw = found
        missing = set(targets) - set.intersection(*(have[m] for m in members))
        now = planner.current_findings(entry, raw, None, kb)
        made = {t: planner.plan_server(entry, raw, t, None, kb, now=now) for t in missing}
        evaluated += 1
        servers = {s.pk: s for s in Server.objects.filter(pk__in=members)}
        ServerPlan.objects.bulk_create([
            ServerPlan(server_id=m, target=t, verdict=plan["verdict"],
                       plan={**plan, "pid": servers[m].pid, "base_url": servers[m].base_url},
                       fingerprint=fingerprint, config_fingerprint=about[m][1],
                       kb_version=kb.version)
            for m in members for t, plan in made.items() if t not in have[m]],
            ignore_conflicts=True)
    return evaluated


def _entry_with(server_ids: list[int], fingerprint: str) -> tuple[dict, dict] | None:
    """(entry, report) of the first of ``server_ids`` whose latest report has the
    configuration ``fingerprint``, or None."""
    for server in Server.objects.filter(pk__in=server_ids).select_related("last_report"):
        raw = server.last_report.raw if server.last_report_id else None
        entry = report_entry(server, raw)
        if entry is not None and planner.server_fingerprint(entry, raw) == fingerprint:
            return entry, raw
    return None


def _plan_all(entry: dict, raw: dict, targets: list[str],
              kb: KnowledgeBase) -> list[tuple[bool, dict]]:
    now = planner.current_findings(entry, raw, None, kb)
    plans = [(False, planner.plan_server(entry, raw, t, None, kb, now=now)) for t in targets]
    pending = planner.pending_upgrades({**raw, "servers": [entry]}, None, kb)
    return plans + [(True, plan) for plan in pending]


def _reusable(fingerprint: str, kb_version: str,
              targets: list[str]) -> list[tuple[bool, dict]] | None:
    """The plans of a server already planned with this configuration and KB (itself after a
    bare restart, or an identical server), when they cover ``targets``; else None."""
    donor = (ServerPlan.objects.filter(fingerprint=fingerprint, kb_version=kb_version)
             .order_by("-planned_at").values_list("server_id", flat=True).first())
    if donor is None:
        return None
    rows = list(ServerPlan.objects.filter(server_id=donor, fingerprint=fingerprint,
                                          kb_version=kb_version))
    if not set(targets) <= {r.target for r in rows if not r.pending}:
        return None
    return [(r.pending, r.plan) for r in rows]


# --- read side (pages) --------------------------------------------------------------------

#: Above this many servers a page asks for the rows of every running server (a join)
#: instead of naming ids: SQLite refuses more than 32,766 query parameters.
MAX_NAMED_SERVERS = 500


def current_rows(servers: Iterable[Server] | QuerySet, kb_version: str) -> QuerySet:
    """Stored plans of ``servers`` (Server rows or a Server queryset) made from the
    configuration the worker last evaluated (``audit_state.config_fingerprint``) under KB
    ``kb_version``. A long list reads every running server's rows (a superset)."""
    if isinstance(servers, QuerySet):
        chosen = {"server__in": servers.values("pk")}
    else:
        ids = [s.pk for s in servers]
        chosen = {"server_id__in": ids} if len(ids) <= MAX_NAMED_SERVERS else \
            {"server__is_running": True}
    return ServerPlan.objects.filter(
        kb_version=kb_version, config_fingerprint=F("server__audit_state__config_fingerprint"),
        **chosen)


def _lazy_key(kb_version: str, fingerprint: str, target: str) -> str:
    return f"advice:plan:{kb_version}:{fingerprint}:{target}"


class LazyPlanner:
    """Plans made on a visit for servers without current rows, one configuration at a time
    (memoised in Django's cache), at most :data:`LAZY_CONFIGURATIONS` evaluated per visit,
    none started after :data:`LAZY_SECONDS`.

    ``known``: ``{server id: planner fingerprint}`` of servers with current rows, so their
    memo key needs no report read. ``plan(server, target)`` returns the plan dict
    (``target``: planned as given) and ``pending(server)`` the pending-upgrade plans, or
    None: over the budget (the server id is then in ``skipped``) or no stored report.
    """

    def __init__(self, kb: KnowledgeBase, known: dict[int, str] | None = None) -> None:
        self.kb = kb
        self.known = dict(known or {})
        self.deadline = time.monotonic() + LAZY_SECONDS
        self.evaluated: set[str] = set()
        self.skipped: set[int] = set()
        self._current: dict[str, Any] = {}
        self._entries: dict[int, tuple[dict, dict, str] | None] = {}

    def _entry(self, server: Server) -> tuple[dict, dict, str] | None:
        if server.pk not in self._entries:
            raw = (Report.objects.filter(pk=server.last_report_id)
                   .values_list("raw", flat=True).first()) if server.last_report_id else None
            entry = report_entry(server, raw)
            self._entries[server.pk] = None if entry is None else (
                entry, raw, planner.server_fingerprint(entry, raw))
        return self._entries[server.pk]

    def fingerprint(self, server: Server) -> str | None:
        """The server's configuration: from its rows, else its latest report (read)."""
        if server.pk in self.known:
            return self.known[server.pk]
        found = self._entry(server)
        return found[2] if found else None

    def _memo(self, server: Server, target: str, compute: Any) -> Any:
        fingerprint = self.fingerprint(server)
        if fingerprint is None:
            return None
        value = cache.get(_lazy_key(self.kb.version, fingerprint, target))
        if value is not None:
            return value
        if fingerprint not in self.evaluated:
            if len(self.evaluated) >= LAZY_CONFIGURATIONS or \
                    (self.evaluated and time.monotonic() > self.deadline):
                self.skipped.add(server.pk)
                return None
            self.evaluated.add(fingerprint)
        found = self._entry(server)
        if found is None:
            return None
        # The latest report's own configuration (its rows may be of the evaluated one).
        entry, raw, fingerprint = found
        value = compute(entry, raw, fingerprint)
        cache.set(_lazy_key(self.kb.version, fingerprint, target), value, LAZY_CACHE_S)
        return value

    def _now(self, entry: dict, raw: dict, fingerprint: str) -> Any:
        if fingerprint not in self._current:
            self._current[fingerprint] = planner.current_findings(entry, raw, None, self.kb)
        return self._current[fingerprint]

    def plan(self, server: Server, target: str) -> dict | None:
        plan = self._memo(server, target, lambda e, r, f: planner.plan_server(
            e, r, target, None, self.kb, now=self._now(e, r, f)))
        return None if plan is None else {**plan, "pid": server.pid,
                                           "base_url": server.base_url}

    def pending(self, server: Server) -> list[dict] | None:
        return self._memo(server, "pending", lambda e, r, f: planner.pending_upgrades(
            {**r, "servers": [e]}, None, self.kb))
