"""Fleet overview: the home page after login.

Every figure comes from a fixed set of queries (counts are SQL aggregates, the hosts
table is one paginated query with subquery annotations plus three batched look-ups for
the page's servers, GPUs and sparkline samples), so the query count does not grow with
the number of hosts (``tests/dashboard/test_overview.py`` pins it).
"""

from __future__ import annotations

import functools
import operator
import re
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.core.cache import cache
from django.core.paginator import Paginator
from django.db.models import (
    Case,
    Count,
    Exists,
    F,
    IntegerField,
    Max,
    OuterRef,
    Prefetch,
    Q,
    QuerySet,
    Subquery,
    TextField,
    Value,
    When,
)
from django.db.models.functions import Cast
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from audit.models import SEVERITY_ORDER, Finding, FindingEvent
from fleet.models import Gpu, Host, MetricSample, Server
from fleet_agent.config import DEFAULT_INTERVAL_S as AGENT_DEFAULT_INTERVAL_S

#: The agent's default collection interval, for hosts that never said theirs.
DEFAULT_INTERVAL_S = AGENT_DEFAULT_INTERVAL_S
#: A host is "stale" after missing this many reports in a row, "offline" after
#: OFFLINE_INTERVALS: one late report is normal jitter, three is a pattern.
STALE_INTERVALS = 3
OFFLINE_INTERVALS = 10
PAGE_SIZE = 50
OPTIONS_TTL_S = 60
LABEL_KEY_RE = re.compile(r"(?!.*__)[A-Za-z0-9][A-Za-z0-9_.-]*")
SEVERITIES = ("critical", "high", "medium", "low", "info")
#: Finding kinds that make a version risky: an upstream bug or a version ceiling.
RISKY_KINDS = ("known_issue", "ceiling")
RISKY_SEVERITIES = ("critical", "high")
#: How far back a "moved onto a risky version" banner looks.
BANNER_WINDOW = timedelta(days=7)
SPARK_WINDOW = timedelta(hours=1)
SPARK_SLOT_S = 120
SPARK_SLOTS = int(SPARK_WINDOW.total_seconds() // SPARK_SLOT_S)
SORTS = {"host": "hostname", "seen": "last_seen", "worst": "worst_rank",
         "findings": "open_findings"}
#: Finding statuses that count as open. Spelled as IN (...) rather than "not resolved" so
#: PostgreSQL can answer from the (status, severity) index.
ACTIVE = ("open", "acknowledged", "silenced")

RANK_CASE = Case(*[When(severity=name, then=Value(rank)) for name, rank in
                   SEVERITY_ORDER.items()], default=Value(0), output_field=IntegerField())

#: Findings that say what just happened on a host: live metric rules (a
#: collapse, a queue), the crash loop (audit.crashloop.CRASH_LOOP_RULE_ID) and upgrade rules.
#: At high or above they head the overview's row before generic configuration advisories.
HAPPENED_CASE = Case(When(Q(severity__in=("critical", "high")) & (
    Q(kind="metric") | Q(rule_id="crash-loop") | Q(rule_id__contains="upgrade")),
    then=Value(1)), default=Value(0), output_field=IntegerField())


# ----------------------------------------------------------------------------- status


def _interval_q(now: datetime, intervals: list[int | None], lo: int | None,
                hi: int | None) -> Q:
    """Hosts last seen between ``lo`` and ``hi`` intervals ago (None = unbounded)."""
    parts = []
    for interval in intervals:
        seconds = interval or DEFAULT_INTERVAL_S
        q = Q(agent_interval_s=interval) if interval else Q(agent_interval_s__isnull=True)
        if lo is not None:
            q &= Q(last_seen__lt=now - timedelta(seconds=lo * seconds))
        if hi is not None:
            q &= Q(last_seen__gte=now - timedelta(seconds=hi * seconds))
        parts.append(q)
    return functools.reduce(operator.or_, parts, Q(pk__in=[]))


def status_filters(now: datetime) -> dict[str, Q]:
    """``{"reporting"|"stale"|"offline": Q}`` over Host, from last_seen vs the agent
    interval. One small query (the distinct intervals, a handful in a real fleet)."""
    intervals = list(Host.objects.order_by().values_list("agent_interval_s", flat=True)
                     .distinct())
    return {
        "reporting": _interval_q(now, intervals, None, STALE_INTERVALS),
        "stale": _interval_q(now, intervals, STALE_INTERVALS, OFFLINE_INTERVALS),
        "offline": _interval_q(now, intervals, OFFLINE_INTERVALS, None)
        | Q(last_seen__isnull=True),
    }


def host_status(host: Host, now: datetime) -> str:
    """``reporting``, ``stale`` or ``offline`` for one host (same thresholds as SQL)."""
    age = host.seconds_since_seen(now)
    interval = host.agent_interval_s or DEFAULT_INTERVAL_S
    if age is None or age > OFFLINE_INTERVALS * interval:
        return "offline"
    return "stale" if age > STALE_INTERVALS * interval else "reporting"


# ----------------------------------------------------------------------------- counts


def fleet_counts(now: datetime, statuses: dict[str, Q]) -> dict[str, Any]:
    """Header figures: hosts by status, open findings by severity (without the "cannot
    check" notes, counted apart in ``cannot_check``), risky servers and pending upgrades.
    Five aggregate queries."""
    hosts = Host.objects.aggregate(total=Count("pk"), **{
        name: Count("pk", filter=q) for name, q in statuses.items()})
    # "Cannot check" notes (missing data, audit.kb.engine) are counted apart: they are not
    # problems found, and the headline would otherwise be mostly them.
    active = Finding.objects.filter(status__in=ACTIVE)
    gaps = Q(evidence__has_key="cannot_check")
    by_severity = dict(active.exclude(gaps).order_by()
                       .values_list("severity").annotate(n=Count("*")))
    cannot_check = active.filter(gaps).count()
    risky = (Finding.objects.filter(status__in=ACTIVE, kind__in=RISKY_KINDS,
                                    severity__in=RISKY_SEVERITIES)
             .order_by().values("server_id").distinct().count())
    pending = (Server.objects.filter(is_running=True).exclude(installed_vllm_version="")
               .exclude(vllm_version="")
               .exclude(installed_vllm_version=F("vllm_version")).count())
    return {"hosts": hosts, "severity": [(s, by_severity.get(s, 0)) for s in SEVERITIES],
            "open_total": sum(by_severity.values()), "cannot_check": cannot_check,
            "risky_servers": risky, "pending_upgrades": pending}


def risky_moves(now: datetime, limit: int = 5) -> list[FindingEvent]:
    """Recent version changes that opened high+ findings (``payload.opened`` non-empty),
    newest first. Scans at most 200 recent version-change events."""
    events = (FindingEvent.objects.filter(kind=FindingEvent.Kind.VERSION_CHANGED,
                                          at__gte=now - BANNER_WINDOW)
              .select_related("host", "server").order_by("-at")[:200])
    return [e for e in events if (e.payload or {}).get("opened")][:limit]


# ----------------------------------------------------------------------------- filters


def _exists(model_qs: QuerySet, **filters: Any) -> Exists:
    return Exists(model_qs.filter(host=OuterRef("pk"), **filters))


def _label_q(text: str) -> Q:
    """``key=value`` matches that label exactly; anything else searches keys and values.
    Only plain keys become a JSON lookup (no ``__`` that Django would read as a path)."""
    key, sep, value = (part.strip() for part in text.partition("="))
    if sep and LABEL_KEY_RE.fullmatch(key):
        return Q(**{f"labels__{key}": value})  # a key transform: works on SQLite too
    return Q(labels_text__icontains=text)


def filtered_hosts(params: dict[str, str], statuses: dict[str, Q]) -> QuerySet[Host]:
    """Hosts matching the overview's filter parameters (q, status, severity, version,
    model, gpu, label, namespace, pod). Each filter is an EXISTS subquery, so rows never
    duplicate."""
    hosts = Host.objects.annotate(labels_text=Cast("labels", TextField()))
    running = Server.objects.filter(is_running=True)
    if params.get("q"):
        hosts = hosts.filter(Q(hostname__icontains=params["q"])
                             | Q(machine_id__icontains=params["q"]))
    if params.get("status") in statuses:
        hosts = hosts.filter(statuses[params["status"]])
    if params.get("severity") in SEVERITIES:
        hosts = hosts.filter(pk__in=_hosts_with([params["severity"]]))
    if params.get("version"):
        hosts = hosts.filter(_exists(running, vllm_version=params["version"]))
    if params.get("model"):
        models = running.annotate(models_text=Cast("model_ids", TextField()))
        hosts = hosts.filter(_exists(models, models_text__icontains=params["model"]))
    if params.get("gpu"):
        hosts = hosts.filter(_exists(Gpu.objects.filter(is_present=True),
                                     name__icontains=params["gpu"]))
    if params.get("label"):
        hosts = hosts.filter(_label_q(params["label"]))
    if params.get("namespace"):  # pods' Kubernetes namespace (exact) and pod name
        hosts = hosts.filter(_exists(running, kubernetes__namespace=params["namespace"]))
    if params.get("pod"):
        hosts = hosts.filter(_exists(running, kubernetes__pod__icontains=params["pod"]))
    return hosts


def annotate_worst(hosts: QuerySet[Host]) -> QuerySet[Host]:
    """Add ``worst_rank`` (4 critical .. 0 info, None when clean), ``worst_title`` and
    ``worst_severity`` (the row's headline: :data:`HAPPENED_CASE` first, then the worst)
    and ``open_findings`` as correlated subqueries."""
    worst = (Finding.objects.filter(status__in=ACTIVE, host=OuterRef("pk"))
             .annotate(rank=RANK_CASE).order_by("-rank", "-last_seen"))
    # The row's headline: what just happened first, then the worst, the newest first.
    headline = (Finding.objects.filter(status__in=ACTIVE, host=OuterRef("pk"))
                .annotate(rank=RANK_CASE, happened=HAPPENED_CASE)
                .order_by("-happened", "-rank", "-first_seen"))
    count = (Finding.objects.filter(status__in=ACTIVE, host=OuterRef("pk")).order_by()
             .values("host").annotate(n=Count("pk")).values("n"))
    return hosts.annotate(worst_rank=Subquery(worst.values("rank")[:1]),
                          worst_title=Subquery(headline.values("title")[:1]),
                          worst_severity=Subquery(headline.values("severity")[:1]),
                          open_findings=Subquery(count, output_field=IntegerField()))


def ordered(hosts: QuerySet[Host], sort: str) -> QuerySet[Host]:
    """Order by a key of :data:`SORTS` (``-`` prefix = descending); nulls last."""
    field = SORTS.get(sort.lstrip("-"), "worst_rank")
    descending = sort.startswith("-") or sort == ""
    expr = F(field).desc(nulls_last=True) if descending else F(field).asc(nulls_last=True)
    return hosts.order_by(expr, "hostname")


def _hosts_with(severities: list[str] | tuple[str, ...]) -> QuerySet:
    """Subquery of host ids with an open finding of one of ``severities`` (a semi-join
    PostgreSQL answers from the severity index, not one probe per host)."""
    return (Finding.objects.filter(status__in=ACTIVE, severity__in=severities).order_by()
            .values("host_id"))


class WorstFirst:
    """The filtered hosts ordered by worst open finding, then hostname, for a Paginator.

    Sorting 10,000 hosts by a per-host subquery costs a probe per host; instead each
    severity level is one semi-join ("hosts whose worst finding is high" = hosts with a
    high finding and none critical), fetched only as far as the requested page reaches.
    Page 1 of a real fleet usually needs the critical and high levels only.
    """

    LEVELS: tuple[str | None, ...] = (*SEVERITIES, None)

    def __init__(self, hosts: QuerySet[Host], descending: bool = True) -> None:
        self.hosts = hosts
        self.levels = self.LEVELS if descending else tuple(reversed(self.LEVELS))

    def count(self) -> int:
        return self.hosts.count()

    def _level_ids(self, level: str | None) -> list[int]:
        rank = SEVERITIES.index(level) if level else len(SEVERITIES)
        qs = self.hosts.exclude(pk__in=_hosts_with(SEVERITIES[:rank])) if rank else self.hosts
        if level is not None:
            qs = qs.filter(pk__in=_hosts_with([level]))
        return list(qs.order_by("hostname", "pk").values_list("pk", flat=True))

    def __getitem__(self, window: slice) -> list[Host]:
        start, stop = window.start or 0, window.stop
        ids: list[int] = []
        for level in self.levels:
            if stop is not None and len(ids) >= stop:
                break
            ids.extend(self._level_ids(level))
        page_ids = ids[start:stop]
        rows = with_page_relations(annotate_worst(Host.objects.filter(pk__in=page_ids)))
        by_id = {h.pk: h for h in rows}
        return [by_id[pk] for pk in page_ids if pk in by_id]


# ----------------------------------------------------------------------------- rows


def page_rows(hosts: list[Host], now: datetime) -> list[dict[str, Any]]:
    """One dict per host of the page with its servers, GPUs and KV sparkline."""
    spark = kv_sparklines([h.pk for h in hosts], now)
    # Hosts with a slot that fails to start (one query): "down" when nothing runs there.
    failing = set(Server.objects.filter(host_id__in=[h.pk for h in hosts],
                                        failed_start__isnull=False)
                  .order_by().values_list("host_id", flat=True).distinct())
    rows = []
    for host in hosts:
        servers = host.running
        status = host_status(host, now)
        if status == "reporting" and host.pk in failing and not servers:
            status = "down"
        gpus: dict[str, int] = {}
        for gpu in host.present_gpus:
            gpus[gpu.name] = gpus.get(gpu.name, 0) + 1
        models = sorted({m for s in servers for m in (s.model_ids or []) if isinstance(m, str)})
        labels = list(host.labels.items()) if isinstance(host.labels, dict) else []
        rows.append({
            "host": host, "status": status,
            "versions": sorted({s.vllm_version for s in servers if s.vllm_version}),
            "pending": any(s.pending_upgrade for s in servers),
            # Bounded per row (80k labels made the overview 5 MB).
            "models": models[:ROW_MODELS], "more_models": max(0, len(models) - ROW_MODELS),
            "labels": labels[:ROW_LABELS], "more_labels": max(0, len(labels) - ROW_LABELS),
            "pods": _pods(servers)[:ROW_LABELS],
            "servers": len(servers),
            "gpus": ", ".join(f"{n}x {name}" for name, n in sorted(gpus.items())) or "no GPUs",
            "spark": spark.get(host.pk),
        })
    return rows


def _pods(servers: list[Server]) -> list[str]:
    """``namespace/pod`` of the host's running servers in Kubernetes pods."""
    pods = []
    for server in servers:
        pod = server.kubernetes if isinstance(server.kubernetes, dict) else None
        if pod and (pod.get("namespace") or pod.get("pod")):
            pods.append(f"{pod.get('namespace') or '?'}/{pod.get('pod') or '?'}")
    return sorted(set(pods))


def with_page_relations(hosts: QuerySet[Host]) -> QuerySet[Host]:
    """Prefetch running servers and present GPUs (two queries for the whole page)."""
    servers = Server.objects.filter(is_running=True).only(
        "host_id", "identity", "vllm_version", "installed_vllm_version", "model_ids",
        "kubernetes").order_by("identity")
    gpus = Gpu.objects.filter(is_present=True).only("host_id", "name", "index")
    return hosts.prefetch_related(Prefetch("servers", servers, to_attr="running"),
                                  Prefetch("gpus", gpus, to_attr="present_gpus"))


def kv_sparklines(host_ids: list[int], now: datetime, width: int = 90,
                  height: int = 18) -> dict[int, dict[str, Any]]:
    """Per host: the highest KV-cache usage of its servers per 2-minute slot over the last
    hour, as SVG polyline segments (a missing slot breaks the line: no data is not zero).

    Returns ``{host_id: {"segments": ["x,y x,y", ...], "last": float | None}}``.
    """
    from front.views_charts import EpochBucket  # one bucketing expression for all charts

    start = now - SPARK_WINDOW
    first = int(start.timestamp() // SPARK_SLOT_S)
    rows = (MetricSample.objects.filter(server__host_id__in=host_ids, ts__gte=start)
            .annotate(slot=EpochBucket(F("ts"), Value(SPARK_SLOT_S))).order_by()
            .values_list("server__host_id", "slot").annotate(kv=Max("kv_cache_usage")))
    per_host: dict[int, dict[int, float | None]] = {}
    for host_id, slot, kv in rows:
        per_host.setdefault(host_id, {})[min(max(int(slot) - first, 0), SPARK_SLOTS - 1)] = kv
    return {host_id: _spark(points, width, height) for host_id, points in per_host.items()}


def _spark(points: dict[int, float | None], width: int, height: int) -> dict[str, Any]:
    segments: list[list[tuple[float, float]]] = [[]]
    for slot in range(SPARK_SLOTS):
        value = points.get(slot)
        if value is None:
            if segments[-1]:
                segments.append([])
            continue
        x = round(slot * (width - 1) / (SPARK_SLOTS - 1), 1)
        y = round((height - 1) - max(0.0, min(1.0, value)) * (height - 2), 1)
        segments[-1].append((x, y))
    drawn = []
    for seg in filter(None, segments):
        if len(seg) == 1:  # a lone minute still shows, as a short dash
            seg = [seg[0], (seg[0][0] + 2, seg[0][1])]
        drawn.append(" ".join(f"{x},{y}" for x, y in seg))
    last = next((points[s] for s in sorted(points, reverse=True) if points[s] is not None),
                None)
    return {"segments": drawn, "last": last}


def filter_options() -> dict[str, list[str]]:
    """Values for the filter drop-downs: running vLLM versions, GPU names, model ids.
    Cached for :data:`OPTIONS_TTL_S` (a new version showing up a minute late in a
    drop-down is harmless; three DISTINCT scans per page view are not free)."""
    return cache.get_or_set("fleet:overview-filter-options", _filter_options, OPTIONS_TTL_S)


def _filter_options() -> dict[str, list[str]]:
    running = Server.objects.filter(is_running=True).order_by()
    versions = sorted(v for v in running.values_list("vllm_version", flat=True).distinct() if v)
    gpus = sorted(Gpu.objects.filter(is_present=True).order_by()
                  .values_list("name", flat=True).distinct())
    models = sorted({m for ids in running.values_list("model_ids", flat=True).distinct()
                     for m in (ids or []) if isinstance(m, str)})
    return {"versions": versions[:FILTER_OPTIONS], "gpus": gpus[:FILTER_OPTIONS],
            "models": models[:FILTER_OPTIONS]}


#: Per overview row: model ids and labels shown (the rest counted); drop-down entries.
ROW_MODELS = 8
ROW_LABELS = 16
FILTER_OPTIONS = 500

FILTER_KEYS = ("q", "status", "severity", "version", "model", "gpu", "label", "namespace",
               "pod")
#: Table columns: (label, sort key or None, tooltip). Sorts start descending except host.
COLUMNS = (("Host", "host", ""), ("Status", None, ""), ("Last seen", "seen", ""),
           ("vLLM", None, ""), ("Models", None, ""), ("GPUs", None, ""),
           ("Worst open finding", "worst", ""), ("Open", "findings", ""),
           ("KV 1 h", None, "highest KV-cache usage of the host's servers per minute, last hour"))


def columns(keep: dict[str, str], sort: str) -> list[dict[str, Any]]:
    """Header cells with sort links that keep the current filter."""
    cells = []
    for label, key, title in COLUMNS:
        cell = {"label": label, "title": title, "url": "", "arrow": "", "num": key == "findings"}
        if key:
            first = key if key == "host" else f"-{key}"
            flipped = key if sort == f"-{key}" else f"-{key}"
            nxt = flipped if sort.lstrip("-") == key else first
            cell["url"] = "?" + urlencode({**keep, "sort": nxt})
            if sort.lstrip("-") == key:
                cell["arrow"] = " ▼" if sort.startswith("-") else " ▲"
        cells.append(cell)
    return cells


@login_required
def overview(request: HttpRequest) -> HttpResponse:
    """The fleet at a glance: counts, a risky-version banner and the filtered hosts table."""
    now = timezone.now()
    params = {k: request.GET.get(k, "").strip() for k in FILTER_KEYS}
    sort = request.GET.get("sort", "-worst")
    statuses = status_filters(now)
    hosts = filtered_hosts(params, statuses)
    if sort.lstrip("-") in ("worst", ""):
        listing: Any = WorstFirst(hosts, descending=sort != "worst")
    else:
        listing = with_page_relations(ordered(annotate_worst(hosts), sort))
    page = Paginator(listing, PAGE_SIZE).get_page(request.GET.get("page"))
    keep = {k: v for k, v in params.items() if v}
    return render(request, "front/overview.html", {
        "now": now, "counts": fleet_counts(now, statuses), "moves": risky_moves(now),
        "page": page, "rows": page_rows(list(page.object_list), now), "params": params,
        "sort": sort, "options": filter_options(), "severities": SEVERITIES,
        "filtered": bool(keep), "columns": columns(keep, sort),
        "page_qs": urlencode({**keep, "sort": sort}),
    })
