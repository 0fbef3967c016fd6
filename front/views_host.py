"""Host detail: GPUs, each server's effective flags, template, versions, restarts,
findings, recommended config slot and downsampled charts over 1 h / 24 h / 7 d."""

from __future__ import annotations

import json
import logging
import uuid
from collections import defaultdict
from datetime import timedelta
from typing import Any

from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.template import TemplateDoesNotExist
from django.template.loader import get_template
from django.utils import timezone

from audit.kb.context import build_context
from audit.kb.effective import effective_flags
from audit.kb.flags import parse_argv
from audit.models import SEVERITY_ORDER, Finding
from audit.rulebook import current_knowledge_base
from fleet import probes as fleet_probes
from fleet.access import can
from fleet.models import ChangeEvent, Gpu, Host, MetricSample, Report, Server
from fleet.recording import server_identity
from fleet_agent.schema import ServerInfo
from front import views_charts as charts
from front.views_failed import failed_start_block
from front.views_findings import release_risks
from front.views_overview import DEFAULT_INTERVAL_S, host_status

log = logging.getLogger(__name__)

RECOMMENDATION_TEMPLATE = "advice/_recommendation.html"
#: ChangeEvents shown per server (newest first).
EVENTS_PER_SERVER = 15


def get_host_for_user(request: HttpRequest, code: uuid.UUID) -> Host:
    """The host with ``code`` or 404. Every signed-in role may read every host."""
    return get_object_or_404(Host, code=code)


def _raw_entry(report: Report | None, server: Server) -> dict[str, Any] | None:
    """The ``servers[]`` element of ``report`` that is this server (same identity)."""
    if report is None:
        return None
    for entry in report.raw.get("servers") or []:
        try:
            if server_identity(ServerInfo.model_validate(entry)) == server.identity:
                return entry
        except ValueError:  # a stored entry the current schema rejects: skip it
            continue
    return None


def show_value(value: Any) -> str:
    """A flag value as an operator would type it: JSON for lists/dicts, lower-case
    booleans, ``unset`` for None."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return str(value)


def flag_rows(ctx: dict[str, Any]) -> list[dict[str, Any]]:
    """Effective flags as rows ``{name, value, default, source, set}``: what the server
    runs with, what vLLM would use without the flag, and where the value came from.
    Flags set on the command line (or by env) come first."""
    flags, sources = ctx["flags"], ctx["flags_meta"].get("sources") or {}
    model = flags.get("model")
    bare = parse_argv(["vllm", "serve", model] if isinstance(model, str) else ["vllm", "serve"],
                      ctx["vllm"].get("table_release"))
    defaults, _ = effective_flags(bare, ctx["vllm"].get("version"), ctx["gpu"].get("memory_gib"),
                                  ctx["gpu"].get("name"), ctx["gpu"].get("compute_capability"),
                                  ctx["gpu"].get("vendor"))
    kinds = ctx["flags_meta"].get("source") or {}
    rows = []
    for name in sorted(flags):
        source = sources.get(name, "argv" if name in ctx["flags_meta"].get("set", []) else "")
        explicit = source == "argv" or source.startswith("env")
        rows.append({"name": name, "value": show_value(flags[name]), "kind": kinds.get(name),
                     "default": show_value(defaults.get(name)), "source": source or "—",
                     "set": explicit, "differs": explicit and flags[name] != defaults.get(name)})
    rows.sort(key=lambda r: (not r["set"], r["name"]))
    return rows


def recommendation_for(entry: dict[str, Any] | None, report: Report | None) -> Any:
    """The recommended config from ``advice.recommend`` when that package is installed,
    else None. Any failure there is logged and shown as "no recommendation", never a 500."""
    if entry is None or report is None:
        return None
    try:
        from advice.recommend import recommend_server
    except ImportError:
        return None
    try:
        return recommend_server(entry, report.raw)
    except Exception:  # a recommender bug must not take the host page down
        log.exception("recommendation failed for report %s", report.report_id)
        return None


def _baseline(ctx: dict[str, Any]) -> dict[str, Any] | None:
    """The seed baseline for this server's speculative recipe, from the KB settings
    ``baselines[family][method]`` (audit/rules/_kb.yaml), with a label saying which."""
    family = ctx["model"].get("family")
    method = (ctx["model"].get("speculative") or {}).get("method")
    table = current_knowledge_base().settings.get("baselines") or {}
    row = (table.get(str(family)) or {}).get(str(method))
    if not row:
        return None
    return {**row, "label": f"seed baseline {family} {method}"}


def _latest_missing(server_ids: list[int]) -> dict[int, list[str]]:
    """Per server: ``extra["missing"]`` of its newest sample (one query)."""
    rows = (MetricSample.objects.filter(server_id__in=server_ids).order_by("server_id", "-ts")
            .values_list("server_id", "extra"))
    if connection.vendor == "postgresql":
        rows = rows.distinct("server_id")
        return {sid: (extra or {}).get("missing") or [] for sid, extra in rows}
    latest: dict[int, list[str]] = {}
    for sid in server_ids:  # SQLite demo: one small query per server
        extra = (MetricSample.objects.filter(server_id=sid).order_by("-ts")
                 .values_list("extra", flat=True).first())
        latest[sid] = (extra or {}).get("missing") or []
    return latest


def _server_block(server: Server, report: Report | None, findings: list[Finding],
                  events: list[ChangeEvent], series: dict[str, list],
                  missing: list[str]) -> dict[str, Any]:
    entry = _raw_entry(report, server)
    ctx = build_context(entry, report.raw) if entry is not None and report else None
    baseline = _baseline(ctx) if ctx else None
    spec = bool(ctx and (ctx["model"].get("speculative") or {}).get("enabled"))
    return {
        "server": server, "ctx": ctx, "flags": flag_rows(ctx) if ctx else [],
        "template": ctx["template"] if ctx else None, "findings": findings,
        "events": events, "baseline": baseline,
        "recommendation": recommendation_for(entry, report),
        "charts": charts.server_charts(server.pk, series, missing, baseline, spec),
        "missing": missing, "failed": failed_start_block(server, report, findings),
        "probes": probe_rows(ctx, server),  # last live-probe results
    }


def probe_rows(ctx: dict[str, Any] | None, server: Server) -> dict[str, Any]:
    """``{"enabled": bool, "rows": [{name, outcome, at, evidence, stale}]}`` for the page."""
    block = (ctx or {}).get("probes") or {}
    rows = [{"name": name, **result} for name, result in block.items()
            if result.get("at") or result.get("stale")]
    enabled = fleet_probes.policy_for(server.host_id, server.identity) is not None
    return {"enabled": enabled, "rows": rows}


#: Servers and GPUs drawn on one host page (running servers first): a report holds at most
#: MAX_SERVERS/MAX_GPUS, but stopped servers accumulate; the page stays bounded
#: (3,000 servers made it 41 MB).
HOST_PAGE_SERVERS = 64
HOST_PAGE_GPUS = 64


def amd_driver_version(gpus: list[Gpu]) -> str:
    """The amdgpu driver version AMD SMI reported, as stored on the host's AMD GPUs (those
    with a gfx target; ``fleet.recording`` keeps the host's driver on each GPU), or ""."""
    return next((g.driver_version for g in gpus if g.gfx_arch and g.driver_version), "")


@login_required
def host_detail(request: HttpRequest, code: uuid.UUID) -> HttpResponse:
    """One host: GPUs, servers (flags, template, versions, restarts, findings,
    recommendation) and charts over ``?window=1h|24h|7d``."""
    host = get_host_for_user(request, code)
    now = timezone.now()
    # A host seen for less than an hour would draw a 24 h chart as a thin sliver at the end.
    default = "1h" if host.first_seen > now - timedelta(hours=1) else charts.DEFAULT_WINDOW
    window, window_s, start = charts.window_bounds(request.GET.get("window", ""), now, default)
    all_servers = host.servers.order_by("-is_running", "identity")
    servers = list(all_servers[:HOST_PAGE_SERVERS])
    hidden_servers = all_servers.count() - len(servers) if len(servers) == HOST_PAGE_SERVERS \
        else 0
    gpus = list(host.gpus.filter(is_present=True).order_by("index")[:HOST_PAGE_GPUS])
    ids = [s.pk for s in servers]
    reports = Report.objects.in_bulk({s.last_report_id for s in servers if s.last_report_id})
    findings: dict[int, list[Finding]] = defaultdict(list)
    for f in Finding.objects.active().filter(host=host).select_related("acknowledged_by",
                                                                        "silenced_by"):
        findings[f.server_id].append(f)
    events: dict[int, list[ChangeEvent]] = defaultdict(list)
    for e in ChangeEvent.objects.filter(host=host).order_by("-at", "-id")[:EVENTS_PER_SERVER * 8]:
        if len(events[e.server_id]) < EVENTS_PER_SERVER:
            events[e.server_id].append(e)
    interval = host.agent_interval_s or DEFAULT_INTERVAL_S
    series = charts.server_series(ids, start, window_s, interval)
    missing = _latest_missing(ids) if ids else {}
    blocks = [_server_block(
        s, reports.get(s.last_report_id),
        sorted(findings[s.pk], key=lambda f: -SEVERITY_ORDER.get(f.severity, 0)),
        events[s.pk], series.get(s.pk, {}), missing.get(s.pk, [])) for s in servers]
    host_charts = charts.gpu_charts(gpus, charts.gpu_series([g.pk for g in gpus], start,
                                                            window_s, interval))
    # The axis starts where the host's history starts: a 3-minute-old host would otherwise
    # draw its data as a sliver at the right edge of the window. Before first_seen there is
    # nothing to show; gaps after it are still drawn as gaps.
    axis_start = max(start, host.first_seen - timedelta(minutes=1))
    chart_data = {"start": axis_start.timestamp() * 1000, "end": now.timestamp() * 1000,
                  "charts": host_charts + [c for b in blocks for c in b["charts"]]}
    status = serving_status(host_status(host, now), blocks)
    return render(request, "front/host_detail.html", {
        "todo": what_to_do(blocks, status, host.last_seen),
        "host": host, "now": now, "status": status, "gpus": gpus,
        "amd_driver": amd_driver_version(gpus), "servers": blocks,
        "hidden_servers": hidden_servers,
        "host_events": events.get(None, []), "window": window,
        "windows": list(charts.WINDOWS), "host_charts": host_charts, "chart_data": chart_data,
        "can_operate": can(request.user, "acknowledge"),
        "can_probe": can(request.user, "run_probes"), "rec_template": _rec_template(),
        "failed_start_errors": _failed_start_errors(host, reports),
    })


#: Findings the host page's summary names ("the three findings that matter").
TODO_FINDINGS = 3


def serving_status(agent_status: str, blocks: list[dict[str, Any]]) -> str:
    """The host's badge: the agent's status, except that a reporting host whose servers do
    not come up (a current failed start and none running) is ``down``, never green."""
    if agent_status != "reporting" or not blocks:
        return agent_status
    failing = any(b.get("failed") for b in blocks)
    running = any(b["server"].is_running and not b.get("failed") for b in blocks)
    return "down" if failing and not running else agent_status


def what_to_do(blocks: list[dict[str, Any]], status: str = "reporting",
               last_seen: Any = None) -> dict[str, Any]:
    """The host page's opening summary, one group per server so that a command never sits
    under another server's findings: ``findings`` (the :data:`TODO_FINDINGS` most severe
    active ones over all servers, newest first within a severity), ``groups`` ([{server,
    findings (its share of those), remedy (audit.remedy dict of a failed start), command
    ({layout, command, more, version, explained}) or None}]), ``commands`` (the commands
    alone) and ``silent`` (the agent's status when it is not reporting, with ``last_seen``).
    A failed start's remedy replaces the server's recommended command: a command for the
    release that last ran would start the failing installed release again."""
    found = [f for b in blocks for f in b["findings"] if f.status != "resolved"]
    found.sort(key=lambda f: (-SEVERITY_ORDER.get(f.severity, 0), -f.first_seen.timestamp()))
    found = found[:TODO_FINDINGS]
    groups = []
    for b in blocks:
        mine = [f for f in found if f.server_id == b["server"].pk]
        remedy = (b.get("failed") or {}).get("remedy")
        command = None if remedy else _todo_command(b)
        if mine or remedy or command:
            groups.append({"server": b["server"], "findings": mine, "remedy": remedy,
                           "command": command})
    orphans = [f for f in found if f.server_id not in {b["server"].pk for b in blocks}]
    if orphans:  # host-level findings (no server)
        groups.insert(0, {"server": None, "findings": orphans, "remedy": None,
                          "command": None})
    return {"findings": found, "groups": groups,
            "commands": [g["command"] for g in groups if g["command"]],
            "silent": None if status == "reporting" else {"status": status,
                                                          "last_seen": last_seen}}


def _todo_command(block: dict[str, Any]) -> dict[str, Any] | None:
    rec = block["recommendation"] or {}
    if rec.get("status") != "ok" or not rec.get("replicas") or not rec.get("diff"):
        return None
    version = (rec.get("version") or {}).get("recommended")
    return {"server": block["server"], "layout": rec.get("layout"),
            "command": rec["replicas"][0]["command"], "more": len(rec["replicas"]) - 1,
            "version": version, "explained": rec.get("explained") or [],
            "release_risks": named_risks(rec, release_risks(version))}


def named_risks(rec: dict[str, Any], risks: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """Each finding that marks the recommended release risky on the Versions page, with
    whether this command still raises it (then the recommendation's own "why") or not (it
    comes from the other servers' configurations): a risky release is never recommended
    without its risk named."""
    raised = {f["rule_id"] for f in (rec.get("self_check") or {}).get("findings") or []}
    why = {e["rule_id"]: e["why"] for e in rec.get("explained") or []}
    return [{"rule_id": rule_id, "severity": severity, "raised": rule_id in raised,
             "why": why.get(rule_id)} for rule_id, severity in risks]


def _failed_start_errors(host: Host, reports: dict[int, Report]) -> list[str]:
    """Failed-start sources the newest report could not read."""
    newest = max(reports.values(), key=lambda r: r.collected_at, default=None)
    if newest is None or newest.collected_at != host.last_collected_at:
        newest = Report.objects.filter(host=host).order_by("-collected_at").first()
    errors = (newest.raw.get("failed_start_errors") if newest else None) or []
    return [str(e)[:300] for e in errors if isinstance(e, str)][:5]


def _rec_template() -> str | None:
    """The recommendations helper's partial when it exists (it may land later)."""
    try:
        get_template(RECOMMENDATION_TEMPLATE)
    except TemplateDoesNotExist:
        return None
    return RECOMMENDATION_TEMPLATE
