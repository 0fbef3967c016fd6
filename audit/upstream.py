"""Upstream watch: re-read the GitHub issues and PRs the rules cite (opt-in beat task).

For every ``https://github.com/<owner>/<repo>/(issues|pull)/<n>`` reference of an active rule,
``GET {AUDIT_UPSTREAM_API_URL}/repos/<owner>/<repo>/issues/<n>`` (GitHub's issues endpoint
answers for pull requests too, with ``pull_request.merged_at``) with the stored ETag in
``If-None-Match``: a 304 costs no rate limit (GitHub REST docs, "conditional requests").

A *change* is an issue closing, or a PR merging (a PR closed unmerged fixes nothing). When it
happened after a citing rule's ``last_verified`` the KB page marks the rule "upstream
changed, re-verify" and ONE knowledge-base alert goes out per change (claimed by a
conditional update of ``alerted_at``; a reopen-and-close is a new change).

Rate limits: a 403/429 with ``X-RateLimit-Remaining: 0`` or ``Retry-After`` stops the run
and no request is made before the time GitHub gave (``X-RateLimit-Reset`` / ``Retry-After``),
kept in the cache. A network error stops the run too; the next beat run starts over. No
retry loop: the beat interval is the retry.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from dataclasses import asdict, dataclass
from typing import Any

import httpx
from django.conf import settings
from django.core.cache import cache
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from audit.kb_status import parse_reference, send_kb_alert
from audit.models import Rule, UpstreamReference

log = logging.getLogger(__name__)

#: Cache key holding the epoch second before which GitHub asked us not to call again.
PAUSE_KEY = "audit:upstream:not-before"
USER_AGENT = "vllm-fleet-audit-upstream-watch"


@dataclass
class WatchRun:
    """Counters of one run; ``stopped`` says why it ended early ("" = it read everything)."""

    checked: int = 0
    not_modified: int = 0
    changed: int = 0
    alerts: int = 0
    errors: int = 0
    stopped: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Stop(Exception):
    """End the run (rate limit or network); the message is the reason."""


def cited_references() -> dict[str, list[Rule]]:
    """``{github url: [active rules citing it]}`` from the rule mirror (synced first)."""
    from audit.rulebook import sync_rules

    sync_rules()
    cited: dict[str, list[Rule]] = {}
    for rule in Rule.objects.filter(active=True):
        for url in map(str, rule.references or []):
            if parse_reference(url):
                cited.setdefault(url, []).append(rule)
    return cited


def run_watch(now: dt.datetime | None = None) -> WatchRun:
    """One pass over every cited issue/PR; returns its counters. Does nothing unless
    ``AUDIT_UPSTREAM_WATCH`` is true or while GitHub's rate limit pause lasts."""
    run = WatchRun()
    if not settings.AUDIT_UPSTREAM_WATCH:
        run.stopped = "disabled (AUDIT_UPSTREAM_WATCH=false)"
        return run
    paused_until = cache.get(PAUSE_KEY)
    if paused_until and time.time() < paused_until:
        resume = dt.datetime.fromtimestamp(paused_until, dt.UTC)
        run.stopped = f"rate limited until {resume:%H:%M:%S} UTC"
        return run
    cited = cited_references()
    with _client() as client:
        for url in sorted(cited):
            try:
                _check(client, url, run)
            except _Stop as stop:
                run.stopped = str(stop)
                log.warning("upstream watch stopped after %d: %s", run.checked, stop)
                break
    run.alerts = _alert_changes(cited, now or timezone.now())
    return run


def _client() -> httpx.Client:
    headers = {"Accept": "application/vnd.github+json", "User-Agent": USER_AGENT,
               "X-GitHub-Api-Version": "2022-11-28"}
    if settings.GITHUB_TOKEN:
        headers["Authorization"] = f"Bearer {settings.GITHUB_TOKEN}"
    return httpx.Client(base_url=settings.AUDIT_UPSTREAM_API_URL.rstrip("/"), headers=headers,
                        timeout=httpx.Timeout(settings.AUDIT_UPSTREAM_TIMEOUT_S),
                        follow_redirects=False)


def _check(client: httpx.Client, url: str, run: WatchRun) -> None:
    repo, number, is_pull = parse_reference(url)  # type: ignore[misc]
    row, _ = UpstreamReference.objects.get_or_create(
        url=url, defaults={"repo": repo, "number": number, "is_pull": is_pull})
    headers = {"If-None-Match": row.etag} if row.etag else {}
    try:
        response = client.get(f"/repos/{repo}/issues/{number}", headers=headers)
    except httpx.HTTPError as exc:
        raise _Stop(f"network error: {exc}") from exc
    _pause_if_limited(response)
    run.checked += 1
    if response.status_code == 304:
        run.not_modified += 1
        UpstreamReference.objects.filter(pk=row.pk).update(checked_at=timezone.now())
    elif response.status_code == 200:
        run.changed += _record(row, response)
    else:
        run.errors += 1
        log.warning("upstream watch: %s answered HTTP %s", url, response.status_code)
    if response.headers.get("X-RateLimit-Remaining") == "0":
        raise _Stop("rate limit used up")


def _pause_if_limited(response: httpx.Response) -> None:
    """Remember GitHub's pause and stop on a rate-limit answer (403/429)."""
    headers = response.headers
    exhausted = headers.get("X-RateLimit-Remaining") == "0"
    if exhausted or "Retry-After" in headers:
        until = _resume_at(headers)
        cache.set(PAUSE_KEY, until, timeout=max(1, int(until - time.time()) + 1))
    if response.status_code in (403, 429) and (exhausted or "Retry-After" in headers):
        raise _Stop(f"rate limited (HTTP {response.status_code})")


def _resume_at(headers: httpx.Headers) -> float:
    """Epoch second to wait for: Retry-After seconds, else X-RateLimit-Reset, else 60 s."""
    for name, base in (("Retry-After", time.time()), ("X-RateLimit-Reset", 0.0)):
        try:
            return base + float(headers[name])
        except (KeyError, ValueError):
            continue
    return time.time() + 60


def _record(row: UpstreamReference, response: httpx.Response) -> int:
    """Store the issue's state; returns 1 when its close/merge moment changed."""
    try:
        body = response.json()
        state = str(body.get("state") or "")[:16]
        closed_at = parse_datetime(body.get("closed_at") or "")
        merged_raw = (body.get("pull_request") or {}).get("merged_at")
    except (ValueError, AttributeError, TypeError):
        log.warning("upstream watch: %s answered a body that is not an issue", row.url)
        return 0
    merged_at = parse_datetime(merged_raw) if isinstance(merged_raw, str) else None
    changed_at = merged_at if row.is_pull else (closed_at if state == "closed" else None)
    is_new = changed_at != row.changed_at
    fields = {"state": state, "closed_at": closed_at, "merged_at": merged_at,
              "etag": response.headers.get("ETag", "")[:200], "checked_at": timezone.now(),
              "changed_at": changed_at}
    if is_new:
        fields["alerted_at"] = None
    UpstreamReference.objects.filter(pk=row.pk).update(**fields)
    return int(is_new and changed_at is not None)


def _alert_changes(cited: dict[str, list[Rule]], now: dt.datetime) -> int:
    """One alert per change not yet alerted whose citing rules predate it."""
    sent = 0
    for ref in UpstreamReference.objects.filter(changed_at__isnull=False, alerted_at=None,
                                                url__in=list(cited)):
        rules = [r for r in cited[ref.url]
                 if r.last_verified is None or r.last_verified < ref.changed_at.date()]
        if not rules or not UpstreamReference.objects.filter(
                pk=ref.pk, alerted_at=None).update(alerted_at=now):
            continue
        verb = "merged" if ref.is_pull else "closed"
        names = ", ".join(r.rule_id for r in rules)
        headline = (f"{ref} {verb} on {ref.changed_at:%Y-%m-%d}: re-verify "
                    f"rule{'s' if len(rules) > 1 else ''} {names}")
        detail = (f"{ref.url} {verb} after {names} {'were' if len(rules) > 1 else 'was'} last "
                  f"verified; the affected range or the fix version may have moved.")
        send_kb_alert(f"upstream:{ref.url}:{ref.changed_at.isoformat()}", headline, detail,
                      now)
        sent += 1
    return sent
