"""Settings (admin only): enrollment secrets, host tokens, users and their roles.

A new enrollment secret's plaintext is rendered once in the POST response and never
stored (only its sha256 is), so reloading the page cannot show it again.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.core.paginator import Paginator
from django.db.models import Prefetch
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from fleet.access import ROLES, permits, role_of, set_role
from fleet.models import AgentToken, EnrollmentSecret

TOKENS_PER_PAGE = 100


class SecretForm(forms.Form):
    """Name of a new enrollment secret (a label for people, e.g. ``rack-12``)."""

    name = forms.CharField(max_length=100)


class UserForm(forms.Form):
    """A new user with an initial role."""

    username = forms.CharField(max_length=150)
    password = forms.CharField(widget=forms.PasswordInput, min_length=8)
    role = forms.ChoiceField(choices=[(r, r) for r in ROLES], initial="viewer")

    def clean_username(self) -> str:
        name = self.cleaned_data["username"]
        if get_user_model().objects.filter(username=name).exists():
            raise forms.ValidationError("that username is taken")
        return name


class RoleForm(forms.Form):
    """The role to give an existing user."""

    role = forms.ChoiceField(choices=[(r, r) for r in ROLES])


def _page(request: HttpRequest, **extra: Any) -> HttpResponse:
    q = request.GET.get("q", "").strip()
    tokens = (AgentToken.objects.filter(revoked_at=None).select_related("host")
              .order_by("host__hostname", "-created_at"))
    if q:
        tokens = tokens.filter(host__hostname__icontains=q)
    users = get_user_model().objects.order_by("username").prefetch_related(
        Prefetch("groups"), "user_permissions")
    context = {
        "secrets": EnrollmentSecret.objects.order_by("revoked_at", "-created_at")[:100],
        "tokens": Paginator(tokens, TOKENS_PER_PAGE).get_page(request.GET.get("page")),
        "users": [(u, role_of(u)) for u in users[:500]], "roles": ROLES, "q": q,
        "secret_form": SecretForm(), "user_form": UserForm(),
    }
    context.update(extra)
    return render(request, "front/settings.html", context)


@permits("manage_users")
def settings_index(request: HttpRequest) -> HttpResponse:
    """The settings page."""
    return _page(request)


@permits("manage_secrets")
@require_POST
def secret_create(request: HttpRequest) -> HttpResponse:
    """Create an enrollment secret and show its plaintext this once."""
    form = SecretForm(request.POST)
    if not form.is_valid():
        return _page(request, secret_form=form)
    row, plaintext = EnrollmentSecret.create(form.cleaned_data["name"])
    return _page(request, new_secret=plaintext, new_secret_row=row)


@permits("manage_secrets")
@require_POST
def secret_revoke(request: HttpRequest, pk: int) -> HttpResponse:
    """Revoke an enrollment secret: agents can no longer enroll with it."""
    secret = get_object_or_404(EnrollmentSecret, pk=pk, revoked_at=None)
    secret.revoked_at = timezone.now()
    secret.save(update_fields=["revoked_at"])
    messages.success(request, f"Enrollment secret {secret.name} revoked.")
    return redirect("fleet:settings")


@permits("manage_tokens")
@require_POST
def token_revoke(request: HttpRequest, pk: int) -> HttpResponse:
    """Revoke a host token: that agent's next report gets 401."""
    token = get_object_or_404(AgentToken.objects.select_related("host"), pk=pk, revoked_at=None)
    token.revoke()
    messages.success(request, f"Token {token.prefix}… of {token.host.hostname} revoked.")
    return redirect("fleet:settings")


@permits("manage_users")
@require_POST
def user_create(request: HttpRequest) -> HttpResponse:
    """Create a user with a password and a role."""
    form = UserForm(request.POST)
    if not form.is_valid():
        return _page(request, user_form=form)
    user = get_user_model().objects.create_user(form.cleaned_data["username"],
                                                password=form.cleaned_data["password"])
    set_role(user, form.cleaned_data["role"])
    messages.success(request, f"User {user.username} created as {form.cleaned_data['role']}.")
    return redirect("fleet:settings")


@permits("manage_users")
@require_POST
def user_role(request: HttpRequest, pk: int) -> HttpResponse:
    """Change a user's role. Admins cannot demote themselves (no locking yourself out)."""
    user = get_object_or_404(get_user_model(), pk=pk)
    form = RoleForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Unknown role.")
    elif user.pk == request.user.pk and form.cleaned_data["role"] != "admin":
        messages.error(request, "You cannot change your own role.")
    else:
        set_role(user, form.cleaned_data["role"])
        messages.success(request, f"{user.username} is now {form.cleaned_data['role']}.")
    return redirect("fleet:settings")
