"""Sign-in throttling: failed logins counted per client address and per username.

After ``LOGIN_FAILURE_LIMIT`` failures (default 10) within ``LOGIN_FAILURE_WINDOW_S``
(default 300 s) from one address, or against one username from anywhere, every further
attempt is refused with a clear message until the window (which starts at the first
failure) has passed; the right password does not get through meanwhile, otherwise the
limit would only slow guessing down. A successful sign-in clears its username's count.
Counts live in Django's cache (Redis in production, shared by all web workers).
Both the dashboard's login and the Django admin's use these forms.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

from django import forms
from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import AuthenticationForm
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse

log = logging.getLogger(__name__)

THROTTLED_MESSAGE = ("Too many failed sign-ins from this address or for this username. "
                     "Try again in {minutes} minutes.")


def client_address(request: HttpRequest | None) -> str:
    """The client's IP: ``X-Real-IP`` set by our proxy when ``BEHIND_PROXY`` is true,
    else ``REMOTE_ADDR`` (a client-sent header is never trusted otherwise)."""
    if request is None:
        return "unknown"
    if getattr(settings, "BEHIND_PROXY", False) and request.META.get("HTTP_X_REAL_IP"):
        return str(request.META["HTTP_X_REAL_IP"]).strip()[:64]
    return str(request.META.get("REMOTE_ADDR", "unknown"))


def _keys(request: HttpRequest | None, username: str) -> tuple[str, str]:
    user_digest = hashlib.sha256(username.strip().lower().encode()).hexdigest()[:32]
    return f"login-fail:ip:{client_address(request)}", f"login-fail:user:{user_digest}"


def is_throttled(request: HttpRequest | None, username: str) -> bool:
    """True when the address or the username has used up its failures in the window."""
    try:
        counts = cache.get_many(list(_keys(request, username)))
    except Exception as exc:  # noqa: BLE001 - any cache backend error
        log.warning("login throttle cache unavailable, sign-in allowed: %s", exc)
        return False
    return any(int(v) >= settings.LOGIN_FAILURE_LIMIT for v in counts.values())


def record_failure(request: HttpRequest | None, username: str) -> None:
    """Count one failed sign-in for the address and the username."""
    try:
        for key in _keys(request, username):
            cache.add(key, 0, timeout=settings.LOGIN_FAILURE_WINDOW_S)
            cache.incr(key)
    except Exception as exc:  # noqa: BLE001
        log.warning("login throttle cache unavailable: %s", exc)


def clear_username(request: HttpRequest | None, username: str) -> None:
    """Forget the username's failures after a successful sign-in."""
    try:
        cache.delete(_keys(request, username)[1])
    except Exception as exc:  # noqa: BLE001
        log.warning("login throttle cache unavailable: %s", exc)


class ThrottleMixin:
    """``clean()`` of an AuthenticationForm, refused while throttled and counting failures."""

    request: HttpRequest | None
    data: Any

    def clean(self) -> dict[str, Any]:
        username = str(self.data.get("username", ""))[:150]
        if is_throttled(self.request, username):
            minutes = max(1, settings.LOGIN_FAILURE_WINDOW_S // 60)
            raise forms.ValidationError(THROTTLED_MESSAGE.format(minutes=minutes),
                                        code="throttled")
        try:
            cleaned = super().clean()  # type: ignore[misc]
        except forms.ValidationError:
            record_failure(self.request, username)
            raise
        clear_username(self.request, username)
        return cleaned


class ThrottledAuthenticationForm(ThrottleMixin, AuthenticationForm):
    """The dashboard's sign-in form."""


class ThrottledAdminAuthenticationForm(ThrottleMixin, AdminAuthenticationForm):
    """The Django admin's sign-in form."""


class LoginView(auth_views.LoginView):
    """Django's LoginView with the throttled form; a throttled attempt answers 429."""

    form_class = ThrottledAuthenticationForm

    def form_invalid(self, form: Any) -> HttpResponse:
        response = super().form_invalid(form)
        if any(e.code == "throttled" for e in form.errors.as_data().get("__all__", [])):
            response.status_code = 429
        return response
