"""``GET /metrics``: the fleet's audit state for Prometheus, read-only.

Protected by the bearer token ``PROMETHEUS_TOKEN`` (``config/settings.py``): unset, the page
does not exist (404); a missing or wrong token is 401. The body is the Prometheus text format
written by ``prometheus_client``; a custom collector reads the database on each scrape, with
every query bounded (grouped counts, and at most :data:`MAX_FINDING_SERIES` finding series,
worst first), so a scrape costs a handful of queries whatever the fleet's size.

Metrics (all gauges; ``fleet_audit_`` prefix):

- ``open_findings{host, server, namespace, pod, rule_id, severity, kind, status,
  finding_id, <host labels>}``: one series per active finding. ``status`` is ``open``,
  ``acknowledged`` or ``silenced`` (a lapsed silence is ``open`` again): alerting rules
  select ``status="open"``, so muting a finding in the dashboard also ends its Prometheus
  alert, while dashboards still count muted ones. ``finding_id`` is the finding's code, the
  same label Alertmanager channels post (``alerts.alertmanager_sync``), and the host labels
  are those named in ``FLEET_EXPORTED_HOST_LABELS`` (default ``env``, ``team``; no other
  key is ever exported, so the label set stays bounded). ``open_findings_by_severity
  {severity}`` holds the complete totals, ``open_findings_series_dropped`` what the cap
  left out.
- ``hosts{status}``: hosts reporting, stale or offline (the overview's thresholds), and
  ``host_offline{host, <host labels>}`` = 1 per offline host (at most
  :data:`MAX_HOST_SERIES`, longest silent first), so an alert can name the host.
- ``site_info{url}`` = 1: the dashboard's ``SITE_URL``, which the shipped rules read to
  put a link to the finding or host into their annotations.
- ``servers{vllm_version}``: running servers per running vLLM version.
- ``pending_upgrades``: running servers whose installed vLLM differs from the running one.
- ``unevaluated_reports`` and ``evaluation_lag_seconds``: reports received and not yet
  evaluated, and the age of the oldest of them (0 when none).
- ``alert_deliveries{status}``: deliveries per status (``failed``, ``permanent_failure``...);
  ``alert_channels_failing``: channels disabled by a permanent failure;
  ``alertmanager_sync_age_seconds{channel}``: per enabled Alertmanager channel, seconds since
  its last complete sync (since its creation when it never completed one).
"""

from __future__ import annotations

import hmac
from collections import Counter
from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.db.models import Case, Count, F, IntegerField, Min, Value, When
from django.http import Http404, HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from alerts.models import AlertChannel, Delivery
from audit.models import Finding
from fleet.models import Host, Report, Server
from front.views_overview import status_filters

#: Finding series exported per scrape (worst severity first). Prometheus' own guidance keeps
#: a target's series in the thousands; the per-severity totals stay exact past the cap.
MAX_FINDING_SERIES = 5000
#: Distinct vLLM versions exported (a real fleet runs a few dozen at most).
MAX_VERSION_SERIES = 500
#: Offline hosts itemised in ``fleet_audit_host_offline`` (the fleet sizes the README plans
#: for are 10,000 hosts; all of them offline is still one series each).
MAX_HOST_SERIES = 10000
_SEVERITY_RANK = {"critical": 0, "high": 1, "medium": 2, "low": 3, "info": 4}
_FINDING_LABELS = ["host", "server", "namespace", "pod", "rule_id", "severity", "kind",
                   "status", "finding_id"]


def host_label_names() -> list[str]:
    """The host labels exported (``FLEET_EXPORTED_HOST_LABELS``), minus any name the
    finding series already use."""
    return [n for n in settings.FLEET_EXPORTED_HOST_LABELS if n not in _FINDING_LABELS]


def host_label_values(labels: Any) -> list[str]:
    """Values of :func:`host_label_names` for one host's labels ("" when absent)."""
    labels = labels if isinstance(labels, dict) else {}
    return [str(labels.get(name) or "")[:200] for name in host_label_names()]


class FleetCollector(Collector):
    """Reads the audit state from the database at each ``collect()`` (one scrape)."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield from self._findings()
        yield self._hosts()
        yield self._offline_hosts()
        yield from self._servers()
        yield from self._evaluation()
        yield from self._alerts()
        site = GaugeMetricFamily("fleet_audit_site_info", "The dashboard's base URL (links "
                                 "in alert annotations).", labels=["url"])
        site.add_metric([settings.SITE_URL], 1)
        yield site

    def _findings(self) -> Iterator[GaugeMetricFamily]:
        active = Finding.objects.active().order_by()
        totals = dict(active.values_list("severity").annotate(n=Count("pk")))
        by_severity = GaugeMetricFamily("fleet_audit_open_findings_by_severity",
                                        "Active findings (open, acknowledged, silenced) "
                                        "per severity.", labels=["severity"])
        for severity in sorted(totals, key=lambda s: _SEVERITY_RANK.get(s, 9)):
            by_severity.add_metric([severity], totals[severity])
        yield by_severity
        now = timezone.now()
        series = Counter(_finding_key(row, now) for row in _worst_first(active))
        detail = GaugeMetricFamily("fleet_audit_open_findings",
                                   "Active findings per host, server, pod, rule, severity, "
                                   "kind and status (open, acknowledged, silenced).",
                                   labels=_FINDING_LABELS + host_label_names())
        for key, count in series.items():
            detail.add_metric(list(key), count)
        yield detail
        dropped = GaugeMetricFamily("fleet_audit_open_findings_series_dropped",
                                    "Active findings left out of fleet_audit_open_findings "
                                    f"by its cap of {MAX_FINDING_SERIES} findings.")
        dropped.add_metric([], max(0, sum(totals.values()) - sum(series.values())))
        yield dropped

    def _hosts(self) -> GaugeMetricFamily:
        now = timezone.now()
        family = GaugeMetricFamily("fleet_audit_hosts", "Hosts per reporting status.",
                                   labels=["status"])
        counts = Host.objects.aggregate(**{name: Count("pk", filter=q)
                                           for name, q in status_filters(now).items()})
        for name, count in counts.items():
            family.add_metric([name], count)
        return family

    def _offline_hosts(self) -> GaugeMetricFamily:
        family = GaugeMetricFamily("fleet_audit_host_offline", "1 per host that stopped "
                                   "reporting (the overview's offline threshold).",
                                   labels=["host", *host_label_names()])
        offline = (Host.objects.filter(status_filters(timezone.now())["offline"])
                   .order_by(F("last_seen").asc(nulls_first=True))
                   .values_list("hostname", "labels")[:MAX_HOST_SERIES])
        for hostname, labels in offline:
            family.add_metric([hostname, *host_label_values(labels)], 1)
        return family

    def _servers(self) -> Iterator[GaugeMetricFamily]:
        running = Server.objects.filter(is_running=True).order_by()
        family = GaugeMetricFamily("fleet_audit_servers", "Running vLLM servers per running "
                                   "vLLM version (empty: unknown).", labels=["vllm_version"])
        rows = running.values_list("vllm_version").annotate(n=Count("pk")).order_by("-n")
        for version, count in rows[:MAX_VERSION_SERIES]:
            family.add_metric([version], count)
        yield family
        pending = (running.exclude(installed_vllm_version="").exclude(vllm_version="")
                   .exclude(installed_vllm_version=F("vllm_version")).count())
        yield GaugeMetricFamily("fleet_audit_pending_upgrades", "Running servers whose "
                                "installed vLLM differs from the running one (restart "
                                "pending).", value=pending)

    def _evaluation(self) -> Iterator[GaugeMetricFamily]:
        waiting = Report.objects.filter(evaluated_at__isnull=True).order_by()
        stats = waiting.aggregate(n=Count("pk"), oldest=Min("received_at"))
        yield GaugeMetricFamily("fleet_audit_unevaluated_reports", "Reports received and not "
                                "evaluated yet.", value=stats["n"])
        lag = (timezone.now() - stats["oldest"]).total_seconds() if stats["oldest"] else 0.0
        yield GaugeMetricFamily("fleet_audit_evaluation_lag_seconds", "Age of the oldest "
                                "report not evaluated yet, in seconds (0: none waiting).",
                                value=max(0.0, lag))

    def _alerts(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily("fleet_audit_alert_deliveries", "Alert deliveries per "
                                   "status (failed: gave up retrying).", labels=["status"])
        counts = dict(Delivery.objects.order_by().values_list("status")
                      .annotate(n=Count("pk")))
        for status in Delivery.Status.values:
            family.add_metric([status], counts.get(status, 0))
        yield family
        yield GaugeMetricFamily("fleet_audit_alert_channels_failing", "Alert channels "
                                "disabled by a permanent delivery failure.",
                                value=AlertChannel.objects.filter(
                                    failing_since__isnull=False).count())
        age = GaugeMetricFamily("fleet_audit_alertmanager_sync_age_seconds", "Seconds since "
                                "each enabled Alertmanager channel's last complete sync.",
                                labels=["channel"])
        now = timezone.now()
        for name, synced, created in (AlertChannel.objects.filter(
                kind="alertmanager", enabled=True).order_by("name")
                .values_list("name", "synced_at", "created_at")):
            age.add_metric([name], max(0.0, (now - (synced or created)).total_seconds()))
        yield age


def _worst_first(active: Any) -> list[dict[str, Any]]:
    """At most :data:`MAX_FINDING_SERIES` active findings, worst severity first."""
    rank = Case(*(When(severity=s, then=Value(r)) for s, r in _SEVERITY_RANK.items()),
                default=Value(9), output_field=IntegerField())
    return list(active.annotate(rank=rank).order_by("rank", "pk").values(
        "host__hostname", "host__labels", "server__identity", "server__kubernetes", "rule_id",
        "severity", "kind", "status", "silenced_until", "code")[:MAX_FINDING_SERIES])


def _status(row: dict[str, Any], now: Any) -> str:
    """open / acknowledged / silenced; a lapsed silence is open (``Finding.alerting``)."""
    if row["status"] == Finding.Status.SILENCED and (
            row["silenced_until"] is not None and row["silenced_until"] <= now):
        return Finding.Status.OPEN
    return row["status"]


def _finding_key(row: dict[str, Any], now: Any) -> tuple[str, ...]:
    pod = row["server__kubernetes"] if isinstance(row["server__kubernetes"], dict) else {}
    return (row["host__hostname"] or "", row["server__identity"] or "",
            str(pod.get("namespace") or ""), str(pod.get("pod") or ""), row["rule_id"],
            row["severity"], row["kind"], _status(row, now), str(row["code"]),
            *host_label_values(row["host__labels"]))


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """The exposition; 404 when ``PROMETHEUS_TOKEN`` is unset, 401 without the right one."""
    token = settings.PROMETHEUS_TOKEN
    if not token:
        raise Http404("Prometheus scraping is not enabled (PROMETHEUS_TOKEN)")
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(),
                                                             token.encode()):
        answer = HttpResponse("a valid bearer token is required\n", status=401,
                              content_type="text/plain")
        answer["WWW-Authenticate"] = 'Bearer realm="fleet-audit-metrics"'
        return answer
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FleetCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
