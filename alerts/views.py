"""Alert pages (staff only): channels, their settings, "send test", the delivery log.

"Send test" creates a delivery and enqueues it exactly like a real alert, so a
working test proves the whole path (worker, transport, destination).
"""

from __future__ import annotations

import uuid
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from alerts import alert_tasks
from alerts.models import AlertChannel, Delivery, Trigger

#: Deliveries shown on the log page (newest first).
LOG_LIMIT = 200


def _require_admin(request: HttpRequest) -> None:
    """Raise PermissionDenied (403) unless the user is staff."""
    if not request.user.is_staff:
        raise PermissionDenied("alert channels are for administrators")


def _get_channel_for_admin(request: HttpRequest, code: uuid.UUID) -> AlertChannel:
    _require_admin(request)
    return get_object_or_404(AlertChannel, code=code)


class LabelsField(forms.CharField):
    """``env=prod, team=ml`` in the form, ``{"env": "prod", "team": "ml"}`` in the model."""

    def prepare_value(self, value: Any) -> str:
        if isinstance(value, dict):
            return ", ".join(f"{k}={v}" for k, v in value.items())
        return value or ""

    def to_python(self, value: Any) -> dict[str, str]:
        if isinstance(value, dict):
            return value
        labels = {}
        for pair in filter(None, (p.strip() for p in (value or "").split(","))):
            key, sep, val = pair.partition("=")
            if not sep or not key.strip():
                raise forms.ValidationError(f"{pair!r} is not key=value")
            labels[key.strip()] = val.strip()
        return labels


class ChannelForm(forms.ModelForm):
    """Channel settings; the destination is validated by the channel's transport."""

    triggers = forms.MultipleChoiceField(
        choices=[c for c in Trigger.choices if c[0] != Trigger.TEST],
        widget=forms.CheckboxSelectMultiple)
    host_labels = LabelsField(required=False, help_text="Only hosts with all these labels, "
                              "e.g. env=prod, team=ml. Empty: every host.")

    class Meta:
        model = AlertChannel
        fields = ["name", "kind", "destination", "secret", "min_severity", "triggers",
                  "host_labels", "include_initial", "enabled"]
        widgets = {"destination": forms.TextInput(attrs={"size": 70}),
                   "secret": forms.TextInput(attrs={"size": 50, "autocomplete": "off"})}
        help_texts = {"secret": "Webhook channels only; left empty, one is generated."}


@login_required
def channel_list(request: HttpRequest) -> HttpResponse:
    """Every channel with its state (failing and why) and its latest delivery."""
    _require_admin(request)
    channels = list(AlertChannel.objects.all())
    for channel in channels:
        channel.latest = channel.deliveries.order_by("-created_at").first()
    return render(request, "alerts/channel_list.html", {"channels": channels})


@login_required
def channel_create(request: HttpRequest) -> HttpResponse:
    """Create a channel."""
    _require_admin(request)
    form = ChannelForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        channel = form.save()
        messages.success(request, f"Channel {channel.name} created; send a test to check it.")
        return redirect("alerts:channels")
    return render(request, "alerts/channel_form.html", {"form": form, "channel": None})


@login_required
def channel_edit(request: HttpRequest, code: uuid.UUID) -> HttpResponse:
    """Edit a channel; saving clears a recorded failure (the admin fixed it)."""
    channel = _get_channel_for_admin(request, code)
    form = ChannelForm(request.POST or None, instance=channel)
    if request.method == "POST" and form.is_valid():
        channel = form.save(commit=False)
        channel.failing_since, channel.failure_reason = None, ""
        channel.save()
        messages.success(request, f"Channel {channel.name} saved.")
        return redirect("alerts:channels")
    return render(request, "alerts/channel_form.html", {"form": form, "channel": channel})


@login_required
@require_POST
def channel_test(request: HttpRequest, code: uuid.UUID) -> HttpResponse:
    """Queue a test message through the normal delivery path; show it in the log."""
    channel = _get_channel_for_admin(request, code)
    with transaction.atomic():
        alert_tasks.send_test(channel.pk)
    messages.success(request, f"Test message queued for {channel.name}; its outcome shows "
                              "below within seconds.")
    return redirect(f"{reverse('alerts:deliveries')}?channel={channel.code}")


@login_required
def delivery_log(request: HttpRequest) -> HttpResponse:
    """Recent deliveries with status, attempts, response codes and errors;
    ``?channel=<code>`` filters to one channel."""
    _require_admin(request)
    deliveries = Delivery.objects.select_related("channel").prefetch_related("attempt_log")
    selected = None
    code = request.GET.get("channel", "")
    if code:
        try:
            selected = AlertChannel.objects.filter(code=uuid.UUID(code)).first()
        except ValueError:
            selected = None
        deliveries = deliveries.filter(channel=selected) if selected else deliveries.none()
    return render(request, "alerts/delivery_log.html", {
        "deliveries": deliveries.order_by("-created_at", "-id")[:LOG_LIMIT],
        "channels": AlertChannel.objects.all(), "selected": selected,
        "filtered": bool(code)})
