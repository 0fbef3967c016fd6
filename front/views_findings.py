"""Audit pages: findings (filter, acknowledge, silence, history, CSV/JSON export), the
knowledge base (rules, staleness, which hosts each rule fires on) and vLLM versions.

Views are thin: an access helper first (:mod:`fleet.access`), domain behaviour on the
models (``Finding.acknowledge`` / ``Finding.silence``).
"""

from __future__ import annotations

import csv
import json
import re
import uuid
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import Count, F, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from audit.kb.cel_functions import version_gt
from audit.kb.coverage import coverage
from audit.kb.paths import active_kb_dirs
from audit.kb.versions import parse_version, version_tuple
from audit.models import SEVERITY_ORDER, Finding, Rule
from audit.rulebook import current_knowledge_base, unsaved_rules
from fleet.access import can, permits
from fleet.models import Server
from front.forms import AcknowledgeForm, SilenceForm
from front.views_overview import ACTIVE, RANK_CASE, RISKY_KINDS, SEVERITIES

FINDINGS_PER_PAGE = 100
STATUSES = ("active", "open", "acknowledged", "silenced", "resolved", "all")
EXPORT_FIELDS = ("code", "hostname", "server", "rule_id", "kind", "severity", "status",
                 "title", "message", "first_seen", "last_seen", "acknowledged_by", "ack_note",
                 "silenced_until", "silence_reason", "references")


# ----------------------------------------------------------------------------- helpers


def get_finding_for_user(request: HttpRequest, code: uuid.UUID) -> Finding:
    """The finding with ``code`` (with host and server) or 404; every role may read it."""
    return get_object_or_404(Finding.objects.select_related("host", "server"), code=code)


def finding_filters(request: HttpRequest) -> dict[str, str]:
    """The findings filter from the query string (unknown values are dropped)."""
    params = {k: request.GET.get(k, "").strip() for k in ("severity", "rule", "host", "status",
                                                           "kind")}
    if params["status"] not in STATUSES:
        params["status"] = "active"
    if params["severity"] not in SEVERITIES:
        params["severity"] = ""
    return params


def filtered_findings(params: dict[str, str]) -> QuerySet[Finding]:
    """Findings matching ``params``, worst first then most recent."""
    qs = Finding.objects.select_related("host", "server", "acknowledged_by", "silenced_by")
    status = params["status"]
    if status == "active":
        qs = qs.filter(status__in=ACTIVE)
    elif status != "all":
        qs = qs.filter(status=status)
    if params["severity"]:
        qs = qs.filter(severity=params["severity"])
    if params["rule"]:
        qs = qs.filter(rule_id=params["rule"])
    if params.get("kind"):
        qs = qs.filter(kind=params["kind"])
    if params["host"]:
        qs = qs.filter(host__hostname__icontains=params["host"])
    return qs.annotate(rank=RANK_CASE).order_by("-rank", "-last_seen", "pk")


class WorstFirst:
    """Findings of a queryset ordered worst severity first, then most recently seen, for a
    Paginator. Sorting 200,000 rows by a CASE over severity is slow; instead the page is
    read level by level (``severity = X ORDER BY last_seen DESC LIMIT n``), skipping
    whole levels before the offset using per-severity counts (one index-only query)."""

    def __init__(self, findings: QuerySet[Finding]) -> None:
        self.findings = findings

    def count(self) -> int:
        return self.findings.count()

    def __getitem__(self, window: slice) -> list[Finding]:
        start, stop = window.start or 0, window.stop or self.count()
        counts = dict(self.findings.order_by().values_list("severity")
                      .annotate(n=Count("*")))
        rows: list[Finding] = []
        offset = start
        for severity in SEVERITIES:
            size = counts.get(severity, 0)
            if offset >= size:
                offset -= size
                continue
            need = stop - start - len(rows)
            level = self.findings.filter(severity=severity).order_by("-last_seen", "pk")
            rows.extend(level[offset:offset + need])
            offset = 0
            if len(rows) >= stop - start:
                break
        return rows


def _back(request: HttpRequest, finding: Finding) -> HttpResponse:
    """Redirect to ``next`` when it is a local URL, else to the finding's page."""
    target = request.POST.get("next", "")
    if target and url_has_allowed_host_and_scheme(target, {request.get_host()},
                                                  request.is_secure()):
        return redirect(target)
    return redirect("audit:finding_detail", code=finding.code)


# ----------------------------------------------------------------------------- findings


@login_required
def finding_list(request: HttpRequest) -> HttpResponse:
    """All findings of the current filter (default: everything still active)."""
    params = finding_filters(request)
    findings = filtered_findings(params).order_by()
    page = Paginator(WorstFirst(findings), FINDINGS_PER_PAGE).get_page(request.GET.get("page"))
    rules = [r.rule_id for r in _mirror()]
    query = request.GET.copy()
    query.pop("page", None)
    return render(request, "front/findings_list.html", {
        "page": page, "params": params, "severities": SEVERITIES, "statuses": STATUSES,
        "rules": rules, "query": query.urlencode(),
        "can_operate": can(request.user, "acknowledge"),
        "ack_form": AcknowledgeForm(), "silence_form": SilenceForm(),
    })


@login_required
def finding_detail(request: HttpRequest, code: uuid.UUID) -> HttpResponse:
    """One finding: message, evidence, remediation, references and its history."""
    finding = get_finding_for_user(request, code)
    events = finding.events.select_related("user").order_by("at", "id")
    earlier = (Finding.objects.filter(server=finding.server, rule_id=finding.rule_id)
               .exclude(pk=finding.pk).order_by("-first_seen")[:20])
    return render(request, "front/findings_detail.html", {
        "finding": finding, "events": events, "earlier": earlier,
        "can_operate": can(request.user, "acknowledge"),
        "ack_form": AcknowledgeForm(), "silence_form": SilenceForm(),
    })


@permits("acknowledge")
@require_POST
def finding_acknowledge(request: HttpRequest, code: uuid.UUID) -> HttpResponse:
    """Acknowledge with an optional note (operator or admin); recorded with the user."""
    finding = get_finding_for_user(request, code)
    form = AcknowledgeForm(request.POST)
    if not form.is_valid():
        messages.error(request, "The note is too long.")
        return _back(request, finding)
    try:
        finding.acknowledge(request.user, form.cleaned_data["note"])
    except ValueError as exc:
        messages.error(request, f"Not acknowledged: {exc}.")
    else:
        messages.success(request, f"Acknowledged {finding.rule_id} on {finding.host.hostname}.")
    return _back(request, finding)


@permits("silence")
@require_POST
def finding_silence(request: HttpRequest, code: uuid.UUID) -> HttpResponse:
    """Silence until a time with a reason (operator or admin); recorded with the user."""
    finding = get_finding_for_user(request, code)
    form = SilenceForm(request.POST)
    if not form.is_valid():
        errors = "; ".join(e for errs in form.errors.values() for e in errs)
        messages.error(request, f"Not silenced: {errors}.")
        return _back(request, finding)
    try:
        finding.silence(request.user, form.cleaned_data["until"], form.cleaned_data["reason"])
    except ValueError as exc:
        messages.error(request, f"Not silenced: {exc}.")
    else:
        until = form.cleaned_data["until"].strftime("%Y-%m-%d %H:%M UTC")
        messages.success(request, f"Silenced {finding.rule_id} on {finding.host.hostname} "
                                  f"until {until}.")
    return _back(request, finding)


def _export_row(f: Finding) -> dict[str, Any]:
    return {
        "code": str(f.code), "hostname": f.host.hostname, "server": f.server.identity,
        "rule_id": f.rule_id, "kind": f.kind, "severity": f.severity, "status": f.status,
        "title": f.title, "message": f.message, "first_seen": f.first_seen.isoformat(),
        "last_seen": f.last_seen.isoformat(),
        "acknowledged_by": f.acknowledged_by.get_username() if f.acknowledged_by else "",
        "ack_note": f.ack_note,
        "silenced_until": f.silenced_until.isoformat() if f.silenced_until else "",
        "silence_reason": f.silence_reason, "references": list(f.references or []),
    }


class _Echo:
    """A file-like whose write returns the line, for streaming csv.writer output."""

    def write(self, value: str) -> str:
        return value


def _csv_lines(rows: Iterator[Finding]) -> Iterator[str]:
    writer = csv.writer(_Echo())
    yield writer.writerow(EXPORT_FIELDS)
    for f in rows:
        row = _export_row(f)
        row["references"] = " ".join(row["references"])
        yield writer.writerow([_defuse(str(row[k])) for k in EXPORT_FIELDS])


#: Characters that make a spreadsheet read a cell as a formula or a DDE command (OWASP CSV
#: injection: = + - @, tab and CR; ``|`` starts a DDE call), also after leading blanks.
FORMULA_STARTS = ("=", "+", "-", "@", "|", "\t", "\r")


def _defuse(cell: str) -> str:
    """``cell`` prefixed with ``'`` when a spreadsheet would run it as a formula."""
    if cell[:1] in FORMULA_STARTS or cell.lstrip(" \t\r\n")[:1] in FORMULA_STARTS:
        return "'" + cell
    return cell


def _json_chunks(rows: Iterator[Finding]) -> Iterator[str]:
    yield "["
    for i, f in enumerate(rows):
        yield ("," if i else "") + json.dumps(_export_row(f))
    yield "]\n"


@login_required
def finding_export(request: HttpRequest, fmt: str) -> StreamingHttpResponse:
    """The current filter as CSV or JSON (streamed, every matching row)."""
    if fmt not in ("csv", "json"):
        raise Http404("unknown export format")
    rows = filtered_findings(finding_filters(request)).iterator(chunk_size=2000)
    stamp = timezone.now().strftime("%Y%m%dT%H%M%SZ")
    if fmt == "csv":
        response = StreamingHttpResponse(_csv_lines(rows), content_type="text/csv; charset=utf-8")
    else:
        response = StreamingHttpResponse(_json_chunks(rows), content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="findings-{stamp}.{fmt}"'
    return response


# ----------------------------------------------------------------------------- knowledge base


def _issue_matcher(q: str) -> re.Pattern | None:
    """``123``, ``#123`` or ``vllm#123`` -> a regex matching that issue/PR number in a URL."""
    match = re.fullmatch(r"(?:[\w.-]+)?#?(\d+)", q.strip())
    return re.compile(rf"/(?:issues|pull)/{match.group(1)}(?:\D|$)") if match else None


def rule_matches(rule: Rule, q: str) -> bool:
    """True when ``q`` (issue number, URL fragment, id or title words) names this rule."""
    if not q:
        return True
    refs = [str(r) for r in rule.references or []]
    issue = _issue_matcher(q)
    if issue is not None:
        return any(issue.search(r) for r in refs)
    needle = q.lower()
    return any(needle in text.lower() for text in [rule.rule_id, rule.title, *refs])


def _mirror() -> list[Rule]:
    """Active rules from the mirror; before anything mirrored them (load_rules at startup or
    the first evaluation), the rule files as unsaved rows: a GET never writes."""
    rules = list(Rule.objects.filter(active=True))
    return rules or unsaved_rules()


@login_required
def kb_list(request: HttpRequest) -> HttpResponse:
    """Every rule with severity, kind, references, freshness and where it fires now, plus
    the active KB (bundle or built-in), its coverage and whether it is stale for the fleet.
    ``?q=`` finds rules by upstream issue number/URL and lists the hosts they hit."""
    from audit import kb_status

    q = request.GET.get("q", "").strip()
    # At most one active finding per (server, rule) (a unique constraint): rows = servers.
    firing = dict(Finding.objects.filter(status__in=ACTIVE).order_by().values_list("rule_id")
                  .annotate(n=Count("*")))
    mirror = _mirror()
    rules = [r for r in mirror if rule_matches(r, q)]
    rules.sort(key=lambda r: (-SEVERITY_ORDER.get(r.severity, 0), r.rule_id))
    hits: dict[str, list[Finding]] = defaultdict(list)
    if q and rules:
        for f in (Finding.objects.active().filter(rule_id__in=[r.rule_id for r in rules])
                  .select_related("host", "server").order_by("host__hostname")[:500]):
            hits[f.rule_id].append(f)
    kb = current_knowledge_base()
    old = kb_status.predates_release(mirror, kb.verified_through)
    upstream = kb_status.upstream_changes(mirror)
    rows = [{"rule": r, "firing": firing.get(r.rule_id, 0), "hits": hits.get(r.rule_id, []),
             "stale": r.rule_id in old, "upstream": upstream.get(r.rule_id, [])}
            for r in rules]
    kb = current_knowledge_base()
    return render(request, "front/kb_list.html", {
        "rows": rows, "q": q, "verified_through": kb.verified_through, "kb_version": kb.version,
        "stale_count": len(old), "upstream_count": len(upstream),
        "active": kb_status.active_kb(), "fleet_stale": kb_status.freshness(),
        "coverage": coverage(kb, active_kb_dirs().data,
                             [v for v in [kb_status.newest_running_version()] if v]),
    })


@login_required
def kb_rule(request: HttpRequest, rule_id: str) -> HttpResponse:
    """One rule and the servers it currently fires on."""
    from audit import kb_status

    rule = Rule.objects.filter(rule_id=rule_id).first() or next(
        (r for r in _mirror() if r.rule_id == rule_id), None)
    if rule is None:
        raise Http404(f"no rule {rule_id}")
    findings = (Finding.objects.active().filter(rule_id=rule_id)
                .select_related("host", "server").order_by("host__hostname", "server__identity"))
    page = Paginator(findings, FINDINGS_PER_PAGE).get_page(request.GET.get("page"))
    verified_through = current_knowledge_base().verified_through
    return render(request, "front/kb_rule.html", {
        "rule": rule, "page": page, "verified_through": verified_through,
        "stale": rule.rule_id in kb_status.predates_release([rule], verified_through),
        "upstream": kb_status.upstream_changes([rule]).get(rule.rule_id, []),
    })


# ----------------------------------------------------------------------------- versions


def version_rows() -> list[dict[str, Any]]:
    """The fleet's vLLM versions (running, or the target of a pending upgrade), newest first,
    with server/host counts and two separate lists: ``rules`` - what the
    *release* brings (high+ findings of version-gated rules: risky; critical = blocked) -
    and ``config_rules`` - what a *configuration* on it does wrong (other high+ findings),
    which never marks the release risky; ``pending_onto`` counts servers whose installed
    package is this version while they still run another (an upgrade waiting for a restart);
    ``state`` also says whether the version is newer than the KB's ``verified_through``."""
    running = Server.objects.filter(is_running=True).order_by()
    counts = list(running.values("vllm_version").annotate(
        servers=Count("pk"), hosts=Count("host_id", distinct=True)))
    pending = dict(running.exclude(installed_vllm_version="")
                   .exclude(installed_vllm_version=F("vllm_version"))
                   .values_list("installed_vllm_version").annotate(n=Count("pk")))
    seen = {row["vllm_version"] for row in counts}
    counts += [{"vllm_version": v, "servers": 0, "hosts": 0} for v in pending if v not in seen]
    kb = current_knowledge_base()
    gated = {rule.id for rule in kb.rules if rule.version_gated}
    release, config = _version_findings(gated)
    rows = []
    for row in counts:
        raw = row["vllm_version"]
        info = parse_version(raw or None)
        entry = release.get(raw, {"servers": set(), "rules": {}})
        severities = set(entry["rules"].values())
        state = ("blocked" if "critical" in severities else "risky" if severities else
                 "unvetted" if version_gt(info.version, kb.verified_through) else
                 "unknown" if info.version is None else "ok")
        rows.append({"raw": raw or "unknown", "version": info.version, "state": state,
                     "servers": row["servers"], "hosts": row["hosts"],
                     "risky_servers": len(entry["servers"]),
                     "rules": _by_severity(entry["rules"]),
                     "config_rules": _by_severity(config.get(raw, {}).get("rules", {})),
                     "pending_onto": pending.get(raw, 0)})
    return _newest_first(rows)


def _version_findings(gated: set[str]) -> tuple[dict, dict]:
    """``(release, config)``: ``{version: {"servers": {id}, "rules": {rule_id: severity}}}``
    of high+ active findings on running servers, split by whether the rule is version-gated."""
    out: tuple[dict, dict] = (defaultdict(lambda: {"servers": set(), "rules": {}}),
                              defaultdict(lambda: {"servers": set(), "rules": {}}))
    for version, server_id, rule_id, severity in (
            Finding.objects.active().filter(kind__in=RISKY_KINDS,
                                            severity__in=("critical", "high"),
                                            server__is_running=True)
            .order_by().values_list("server__vllm_version", "server_id", "rule_id", "severity")
            .distinct()):
        entry = out[0 if rule_id in gated else 1][version]
        entry["servers"].add(server_id)
        if SEVERITY_ORDER[severity] >= SEVERITY_ORDER[entry["rules"].get(rule_id, severity)]:
            entry["rules"][rule_id] = severity
    return out


def release_risks(version: str | None) -> list[tuple[str, str]]:
    """What marks ``version`` risky on the Versions page: ``[(rule_id, severity)]`` of the
    high+ active findings of version-gated rules on running servers of that version (one
    query), worst first; [] when the release is not risky."""
    if not version:
        return []
    gated = {rule.id for rule in current_knowledge_base().rules if rule.version_gated}
    rules: dict[str, str] = {}
    for rule_id, severity in (Finding.objects.active().filter(
            kind__in=RISKY_KINDS, severity__in=("critical", "high"), server__is_running=True,
            server__vllm_version=version, rule_id__in=gated)
            .order_by().values_list("rule_id", "severity").distinct()):
        if SEVERITY_ORDER[severity] >= SEVERITY_ORDER[rules.get(rule_id, severity)]:
            rules[rule_id] = severity
    return _by_severity(rules)


def _by_severity(rules: dict[str, str]) -> list[tuple[str, str]]:
    return sorted(rules.items(), key=lambda kv: -SEVERITY_ORDER[kv[1]])


def _newest_first(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    known = [r for r in rows if version_tuple(r["version"]) is not None]
    unknown = [r for r in rows if version_tuple(r["version"]) is None]
    known.sort(key=lambda r: version_tuple(r["version"]), reverse=True)
    return known + unknown


@login_required
def versions(request: HttpRequest) -> HttpResponse:
    """The fleet's vLLM versions and which are risky or blocked per the KB."""
    kb = current_knowledge_base()
    return render(request, "front/versions_list.html", {
        "rows": version_rows(), "verified_through": kb.verified_through,
    })
