"""Opt-in live probes, dashboard side: which probes the agent should run now.

An operator enables probes per server or per host (:class:`fleet.models.ProbePolicy`); each
report answer then names the servers of that host whose probes are due
(``[{"server": identity, "names": [...]}]``), at most once per ``interval_s`` (an hour at
least) per server. A server without an enabled policy is never named, so the agent never
sends it a probe request.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from fleet.models import Host, ProbePolicy
from fleet_agent.schema import PROBE_NAMES


class PolicyError(ValueError):
    """An invalid policy request (unknown probe name, interval under an hour)."""


def enable(host: Host, server_identity: str, names: list[str] | None, interval_s: int,
           user: str) -> ProbePolicy:
    """Turn probes on for ``server_identity`` of ``host`` ("" for every server).

    ``names`` None means every probe. Raises :class:`PolicyError` for an unknown name or an
    interval outside ``ProbePolicy.MIN_PROBE_INTERVAL_S``..``MAX_PROBE_INTERVAL_S`` seconds.
    """
    chosen = list(PROBE_NAMES) if names is None else list(dict.fromkeys(names))
    unknown = sorted(set(chosen) - set(PROBE_NAMES))
    if unknown or not chosen:
        raise PolicyError(f"unknown probe name(s) {unknown}; known: {list(PROBE_NAMES)}")
    if interval_s < ProbePolicy.MIN_PROBE_INTERVAL_S:
        raise PolicyError(f"interval_s {interval_s} is under the minimum "
                          f"{ProbePolicy.MIN_PROBE_INTERVAL_S} s (one run per hour per server)")
    if interval_s > ProbePolicy.MAX_PROBE_INTERVAL_S:
        raise PolicyError(f"interval of {interval_s // 3600} h is over the maximum "
                          f"{ProbePolicy.MAX_PROBE_INTERVAL_S // 3600} h (a year)")
    policy, _ = ProbePolicy.objects.update_or_create(
        host=host, server_identity=server_identity[:255],
        defaults={"names": chosen, "interval_s": interval_s, "enabled": True,
                  "enabled_by": user[:150], "updated_at": timezone.now()})
    return policy


def disable(host: Host, server_identity: str) -> int:
    """Turn probes off for that server (or the host's blanket policy); returns rows changed."""
    return ProbePolicy.objects.filter(host=host, server_identity=server_identity).update(
        enabled=False, updated_at=timezone.now())


def _due(policy: ProbePolicy, identity: str, now: datetime) -> bool:
    last = policy.last_requested.get(identity)
    if not isinstance(last, str):
        return True
    try:
        at = datetime.fromisoformat(last)
    except ValueError:
        return True
    return now - at >= timedelta(seconds=max(policy.interval_s,
                                             ProbePolicy.MIN_PROBE_INTERVAL_S))


def due_requests(host: Host, identities: list[str],
                 now: datetime | None = None) -> list[dict[str, Any]]:
    """``[{"server", "names"}]`` due now for the servers ``identities`` of this report, and
    mark them requested. A server-specific policy wins over the host-wide one."""
    now = now or timezone.now()
    out: list[dict[str, Any]] = []
    with transaction.atomic():
        policies = {p.server_identity: p for p in
                    ProbePolicy.objects.select_for_update().filter(host=host, enabled=True)}
        if not policies:
            return out
        for identity in dict.fromkeys(identities):
            policy = policies.get(identity) or policies.get("")
            if policy is None or not _due(policy, identity, now):
                continue
            policy.last_requested[identity] = now.isoformat()
            out.append({"server": identity, "names": list(policy.names)})
        for policy in policies.values():
            policy.save(update_fields=["last_requested"])
    return out


def last_results(raw_server: dict[str, Any]) -> list[dict[str, Any]]:
    """The probe results a report's server entry carries (for the host page)."""
    results = raw_server.get("probes") or []
    return [r for r in results if isinstance(r, dict) and r.get("name") in PROBE_NAMES]


def policy_for(host_id: int, identity: str) -> ProbePolicy | None:
    """The enabled policy that covers this server (its own, else the host-wide one)."""
    policies = {p.server_identity: p for p in
                ProbePolicy.objects.filter(host_id=host_id, enabled=True,
                                           server_identity__in=[identity, ""])}
    return policies.get(identity) or policies.get("")
