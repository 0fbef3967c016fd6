"""Is the knowledge base still right? Freshness of the active KB, rules to re-verify, and the
knowledge-base alerts (sent once per change through the alert outbox).

- The active KB is *stale for the fleet* when it is older than ``AUDIT_KB_MAX_AGE_DAYS``
  (30 days) or when a running server's vLLM is newer than its ``verified_through``.
- A rule *predates the KB's release*: its ``last_verified`` is before the publication date of
  the release the KB claims (``verified_through``), so it was not re-checked against it. This
  replaces "older than 60 days from today", which flagged half of a fresh install.
- A rule's *upstream changed*: an issue it cites closed, or a PR it cites merged, after its
  ``last_verified`` (:mod:`audit.upstream` keeps the state).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable

from django.conf import settings
from django.utils import timezone

from audit.kb.cel_functions import version_gt
from audit.kb.coverage import release_dates
from audit.kb.paths import active_kb_dirs
from audit.kb.versions import parse_version, version_tuple
from audit.kb_store import ActiveKb, active_kb
from audit.models import Rule, UpstreamReference
from audit.signals import kb_attention

_REF_RE = re.compile(r"^https://github\.com/([^/]+/[^/]+)/(issues|pull)/(\d+)")


def newest_running_version() -> str | None:
    """Newest vLLM release a running server of the fleet reports (normalised), or None."""
    from fleet.models import Server

    raws = Server.objects.filter(is_running=True).exclude(vllm_version="").values_list(
        "vllm_version", flat=True).distinct()
    versions = [v for v in (parse_version(raw).version for raw in raws)
                if version_tuple(v) is not None]
    return max(versions, key=version_tuple, default=None)


def freshness(active: ActiveKb | None = None, now: dt.datetime | None = None
              ) -> list[tuple[str, str]]:
    """``[(key, sentence)]`` of reasons the active KB is stale for this fleet ([] = fresh).

    ``key`` names the reason for the KB version (one alert per key).
    """
    active = active or active_kb()
    now = now or timezone.now()
    reasons = []
    age = (now - active.created_at).days
    limit = settings.AUDIT_KB_MAX_AGE_DAYS
    if age > limit:
        reasons.append((f"age:{active.content_hash}",
                        f"The knowledge base {active.version} is {age} days old (more than "
                        f"{limit}); install a newer bundle with manage.py kb_update."))
    running = newest_running_version()
    if running and active.verified_through and version_gt(running, active.verified_through):
        reasons.append((f"release:{active.content_hash}:{running}",
                        f"vLLM {running} runs in the fleet, but the knowledge base is verified "
                        f"only through {active.verified_through}: findings on it may be "
                        f"missing or wrong."))
    return reasons


def predates_release(rules: Iterable[Rule], verified_through: str | None) -> set[str]:
    """Ids of ``rules`` last verified before ``verified_through`` was published (no date
    known for that release: none)."""
    published = release_dates(active_kb_dirs().data).get(verified_through or "")
    if not published:
        return set()
    day = dt.date.fromisoformat(published)
    return {r.rule_id for r in rules if r.last_verified is None or r.last_verified < day}


def parse_reference(url: str) -> tuple[str, int, bool] | None:
    """``https://github.com/vllm-project/vllm/pull/123`` -> ``("vllm-project/vllm", 123,
    True)``; None for anything else."""
    match = _REF_RE.match(url)
    return (match.group(1), int(match.group(3)), match.group(2) == "pull") if match else None


def upstream_changes(rules: Iterable[Rule]) -> dict[str, list[UpstreamReference]]:
    """``{rule_id: [references that closed/merged after the rule's last_verified]}``."""
    rules = list(rules)
    urls = {str(u) for r in rules for u in r.references or [] if parse_reference(str(u))}
    changed = {ref.url: ref for ref in UpstreamReference.objects.filter(
        url__in=urls, changed_at__isnull=False)}
    out: dict[str, list[UpstreamReference]] = {}
    for rule in rules:
        hits = [changed[u] for u in map(str, rule.references or []) if u in changed
                and (rule.last_verified is None
                     or changed[u].changed_at.date() > rule.last_verified)]
        if hits:
            out[rule.rule_id] = hits
    return out


def send_kb_alert(key: str, headline: str, detail: str,
                  now: dt.datetime | None = None) -> list[int]:
    """Announce a knowledge-base alert (:data:`audit.signals.kb_attention`): the alerts app
    sends it once ever per ``key`` and channel. Returns the delivery ids its receivers made
    (none when no alerts app is installed)."""
    responses = kb_attention.send(sender=None, key=key, headline=headline, detail=detail,
                                  now=now or timezone.now())
    return [pk for _, ids in responses for pk in (ids or [])]


def alert_if_stale(now: dt.datetime | None = None) -> int:
    """Alert once per staleness reason of the active KB; returns deliveries created."""
    return sum(len(send_kb_alert(key, "knowledge base is stale", sentence, now))
               for key, sentence in freshness(now=now))
