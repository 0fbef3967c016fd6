"""Minimal login-required pages: the hosts list and one host's servers."""

from __future__ import annotations

import uuid

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils import timezone

from fleet.models import Host


def _get_host_for_user(request: HttpRequest, code: uuid.UUID) -> Host:
    """The host with ``code``; every signed-in user sees every host (roles come later)."""
    return get_object_or_404(Host, code=code)


@login_required
def host_list(request: HttpRequest) -> HttpResponse:
    """Hosts with last seen, running vLLM versions and a GPU summary."""
    hosts = Host.objects.prefetch_related("servers", "gpus").order_by("hostname")
    return render(request, "fleet/host_list.html", {"hosts": hosts, "now": timezone.now()})


@login_required
def host_detail(request: HttpRequest, code: uuid.UUID) -> HttpResponse:
    """One host: GPUs, servers with raw argv and template hash, recent changes."""
    host = _get_host_for_user(request, code)
    return render(request, "fleet/host_detail.html", {
        "host": host, "now": timezone.now(),
        "servers": host.servers.order_by("-is_running", "identity"),
        "gpus": host.gpus.filter(is_present=True).order_by("index"),
        "events": host.events.select_related("server")[:50],
    })
