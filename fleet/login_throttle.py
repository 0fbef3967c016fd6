"""Sign-in throttling: failed logins counted per (address, username), per address and per
username, so that nobody can lock another person out from their own address.

Within ``LOGIN_FAILURE_WINDOW_S`` (default 300 s, from the first failure):

* ``LOGIN_FAILURE_LIMIT`` (default 10) failures for one username from one address refuse that
  address's further attempts for that username, the right password included (else the limit
  would only slow guessing down);
* ``LOGIN_IP_FAILURE_LIMIT`` (default 30) failures from one address, any usernames, refuse
  every attempt from it (a spray over many usernames);
* ``LOGIN_USER_FAILURE_LIMIT`` (default 100) failures against one username from anywhere (a
  distributed guess) refuse it only from addresses that have themselves failed in the window:
  an address with no failure still signs in with the right password, so an anonymous
  attacker cannot lock the owner out, and each attacking address gets one guess per window.

A successful sign-in clears its (address, username) and username counts. Counts live in
Django's cache (Redis in production, shared by all web workers); the address is
:func:`fleet.client_ip.client_ip`. Both the dashboard's login and the admin's use these forms.
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

from fleet.client_ip import client_ip

log = logging.getLogger(__name__)

THROTTLED_MESSAGE = ("Too many failed sign-ins from this address. "
                     "Try again in {minutes} minutes.")


def client_address(request: HttpRequest | None) -> str:
    """The client's IP (:func:`fleet.client_ip.client_ip`)."""
    return client_ip(request)


def _keys(request: HttpRequest | None, username: str) -> tuple[str, str, str]:
    """``(address+username, address, username)`` cache keys."""
    user_digest = hashlib.sha256(username.strip().lower().encode()).hexdigest()[:32]
    address = client_address(request)
    return (f"login-fail:pair:{address}:{user_digest}", f"login-fail:ip:{address}",
            f"login-fail:user:{user_digest}")


def is_throttled(request: HttpRequest | None, username: str) -> bool:
    """True when this address may not try ``username`` now (see the module doc)."""
    keys = _keys(request, username)
    try:
        counts = cache.get_many(list(keys))
    except Exception as exc:  # noqa: BLE001 - any cache backend error
        log.warning("login throttle cache unavailable, sign-in allowed: %s", exc)
        return False
    pair, address, user = (int(counts.get(key) or 0) for key in keys)
    return (pair >= settings.LOGIN_FAILURE_LIMIT
            or address >= settings.LOGIN_IP_FAILURE_LIMIT
            or (user >= settings.LOGIN_USER_FAILURE_LIMIT and address > 0))


def record_failure(request: HttpRequest | None, username: str) -> None:
    """Count one failed sign-in for the address and the username."""
    try:
        for key in _keys(request, username):
            cache.add(key, 0, timeout=settings.LOGIN_FAILURE_WINDOW_S)
            cache.incr(key)
    except Exception as exc:  # noqa: BLE001
        log.warning("login throttle cache unavailable: %s", exc)


def clear_username(request: HttpRequest | None, username: str) -> None:
    """Forget the username's failures (and this address's for it) after a sign-in."""
    pair, _, user = _keys(request, username)
    try:
        cache.delete_many([pair, user])
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
