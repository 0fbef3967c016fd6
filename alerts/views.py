"""Alert pages (the ``manage_alerts`` permission, as the menu): channels, their settings,
"send test", the delivery log.

"Send test" creates a delivery and enqueues it exactly like a real alert, so a
working test proves the whole path (worker, transport, destination).
A webhook secret is shown once, when the channel is created; Slack and webhook URLs (a
Slack URL is itself the credential) are shown masked and never rendered back in a form.
"""

from __future__ import annotations

import uuid
from functools import partial
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from alerts import alert_tasks
from alerts.models import AlertChannel, Delivery, Trigger
from alerts.transports import CLIENT_OPTION_FIELDS
from alerts.transports.http import mask_url
from fleet.access import require

#: Deliveries shown on the log page (newest first).
LOG_LIMIT = 200


#: Channel kinds whose destination URL is a credential: shown masked, never rendered back.
URL_KINDS = frozenset({"slack", "webhook"})
#: Credentials never rendered back in the form (empty on edit keeps the stored value).
KEPT_SECRETS = ("secret", "bearer_token", "basic_password", "tls_client_key")


def _require_admin(request: HttpRequest) -> None:
    """Raise PermissionDenied (403) unless the user may manage alert channels (the
    permission the menu checks, ``audit.change_alertchannel``)."""
    require(request, "manage_alerts")


def shown_destination(channel: AlertChannel) -> str:
    """The destination as pages show it: URLs masked (see :func:`mask_url`), emails as is."""
    return mask_url(channel.destination) if channel.kind in URL_KINDS else channel.destination


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
                  "host_labels", "include_initial", "enabled", *CLIENT_OPTION_FIELDS]
        widgets = {"destination": forms.TextInput(attrs={"size": 70}),
                   **{name: forms.PasswordInput(render_value=False,
                                                attrs={"size": 50, "autocomplete": "off"})
                      for name in KEPT_SECRETS},
                   **{name: forms.Textarea(attrs={"rows": 3, "cols": 64})
                      for name in ("tls_ca", "tls_client_cert")}}
        help_texts = {"secret": "Webhook channels only; left empty, one is generated "
                                "(shown once) or, when editing, the current one is kept.",
                      "bearer_token": "Alertmanager only: bearer token, or",
                      "basic_username": "Alertmanager only: basic auth user and password.",
                      "basic_password": "Left empty when editing, the current one is kept.",
                      "tls_client_key": "Left empty when editing, the current key is kept."}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.existing = self.instance if self.instance.pk else None
        if self.existing is not None and self.existing.kind in URL_KINDS:
            # Never render a credential URL back: empty means "keep the current one".
            self.initial["destination"] = ""
            field = self.fields["destination"]
            field.required = False
            field.widget.attrs["placeholder"] = shown_destination(self.existing)
            field.help_text = "Left empty, the current URL (shown masked) is kept."

    def clean_destination(self) -> str:
        value = (self.cleaned_data.get("destination") or "").strip()
        if not value and self.existing is not None:
            return self.existing.destination
        return value

    def _kept(self, name: str) -> str:
        """A write-only field: empty when editing keeps the stored value."""
        value = self.cleaned_data.get(name) or ""
        if not value and self.existing is not None:
            return str(getattr(self.existing, name))
        return value

    def clean_secret(self) -> str:
        return self._kept("secret")

    def clean_bearer_token(self) -> str:
        return self._kept("bearer_token")

    def clean_basic_password(self) -> str:
        return self._kept("basic_password")

    def clean_tls_client_key(self) -> str:
        return self._kept("tls_client_key")


@login_required
def channel_list(request: HttpRequest) -> HttpResponse:
    """Every channel with its state (failing and why) and its latest delivery."""
    _require_admin(request)
    return _list_page(request)


def _list_page(request: HttpRequest, **extra: Any) -> HttpResponse:
    channels = list(AlertChannel.objects.all())
    for channel in channels:
        channel.latest = channel.deliveries.order_by("-created_at").first()
        channel.shown_destination = shown_destination(channel)
    return render(request, "alerts/channel_list.html", {"channels": channels, **extra})


@never_cache  # the answer shows a new webhook secret once
@login_required
def channel_create(request: HttpRequest) -> HttpResponse:
    """Create a channel."""
    _require_admin(request)
    form = ChannelForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        channel = form.save()
        if channel.transport().syncs_state:  # backfill: every open finding fires now
            transaction.on_commit(partial(alert_tasks.enqueue_sync, channel.pk))
        if not channel.transport().uses_secret:
            messages.success(request, f"Channel {channel.name} created; send a test to check it.")
            return redirect("alerts:channels")
        # The signing secret is shown in this response only (not in a message cookie).
        return _list_page(request, new_channel=channel, new_secret=channel.secret)
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
        if channel.transport().syncs_state:
            transaction.on_commit(partial(alert_tasks.enqueue_sync, channel.pk))
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
