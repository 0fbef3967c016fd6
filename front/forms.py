"""Forms of the findings workflow: acknowledge with a note, silence until a time."""

from __future__ import annotations

from datetime import datetime, timedelta

from django import forms
from django.utils import timezone

#: Quick silence durations offered next to the explicit end time.
DURATIONS = {"1h": timedelta(hours=1), "4h": timedelta(hours=4), "1d": timedelta(days=1),
             "7d": timedelta(days=7), "30d": timedelta(days=30)}


class AcknowledgeForm(forms.Form):
    """An acknowledgement; the note says who is on it or why it is accepted."""

    note = forms.CharField(max_length=2000, required=False,
                           widget=forms.TextInput(attrs={"placeholder": "note (optional)"}))


class SilenceForm(forms.Form):
    """A silence: either a duration from now or an explicit end (UTC), and a reason."""

    duration = forms.ChoiceField(choices=[("", "until…")] + [(k, k) for k in DURATIONS],
                                 required=False, initial="1d")
    until = forms.DateTimeField(required=False, input_formats=["%Y-%m-%dT%H:%M",
                                                               "%Y-%m-%d %H:%M"],
                                widget=forms.DateTimeInput(attrs={"type": "datetime-local"}))
    reason = forms.CharField(max_length=2000,
                             widget=forms.TextInput(attrs={"placeholder": "reason (required)"}))

    def clean(self) -> dict:
        data = super().clean()
        until: datetime | None = data.get("until")
        if until is None and data.get("duration") in DURATIONS:
            until = timezone.now() + DURATIONS[data["duration"]]
        if until is None:
            raise forms.ValidationError("choose a duration or an end time")
        if timezone.is_naive(until):
            until = timezone.make_aware(until, timezone.get_current_timezone())
        if until <= timezone.now():
            raise forms.ValidationError("the silence must end in the future")
        data["until"] = until
        return data
