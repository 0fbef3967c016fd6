"""Turn live probes on or off for one server of a host; operators only."""

from __future__ import annotations

import uuid

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from fleet import probes as fleet_probes
from fleet.access import permits
from front.views_host import get_host_for_user

#: Default run interval offered on the host page: once a day per server.
DEFAULT_PROBE_INTERVAL_S = 24 * 3600


@permits("run_probes")  # login first: anonymous users are redirected, never told 405
@require_POST
def probe_policy(request: HttpRequest, code: uuid.UUID) -> HttpResponse:
    """POST ``server`` (identity, "" for every server), ``action`` (``enable``/``disable``),
    optional ``interval_h`` (hours, at least 1); back to the host page with a message."""
    host = get_host_for_user(request, code)
    identity = request.POST.get("server", "")[:255]
    if request.POST.get("action") == "disable":
        fleet_probes.disable(host, identity)
        messages.info(request, f"Live probes off for {identity or 'every server'}.")
        return redirect("fleet:host_detail", code=host.code)
    try:
        hours = int(request.POST.get("interval_h") or DEFAULT_PROBE_INTERVAL_S // 3600)
        fleet_probes.enable(host, identity, None, hours * 3600, request.user.get_username())
    except (ValueError, fleet_probes.PolicyError) as exc:
        messages.error(request, f"Probes not enabled: {exc}")
        return redirect("fleet:host_detail", code=host.code)
    messages.success(request, f"Live probes on for {identity or 'every server'}: they run with "
                              "the agent's next report, then at most once per interval.")
    return redirect("fleet:host_detail", code=host.code)

