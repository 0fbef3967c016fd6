"""Settings (admin only): enrollment secrets, host tokens, users and their roles.

A new enrollment secret's plaintext is rendered once in the POST response and never
stored (only its sha256 is), so reloading the page cannot show it again.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth import get_user_model, password_validation
from django.core.paginator import Paginator
from django.db.models import Prefetch
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from fleet.access import ROLES, permits, role_of, set_role
from fleet.models import MAX_SECRET_TTL_H, MAX_SECRET_USES, AgentToken, EnrollmentSecret

TOKENS_PER_PAGE = 100


class SecretForm(forms.Form):
    """A new enrollment secret: a label for people (``rack-12``), how many machines it may
    enroll and for how many hours."""

    name = forms.CharField(max_length=100)
    max_uses = forms.IntegerField(min_value=1, max_value=MAX_SECRET_USES, required=False)
    valid_hours = forms.IntegerField(min_value=1, max_value=MAX_SECRET_TTL_H, required=False)


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

    def clean(self) -> dict[str, Any]:
        """Run AUTH_PASSWORD_VALIDATORS (length, common, numeric, similar to the name)."""
        data = super().clean()
        password = data.get("password")
        if password:
            candidate = get_user_model()(username=data.get("username", ""))
            try:
                password_validation.validate_password(password, user=candidate)
            except forms.ValidationError as exc:
                self.add_error("password", exc)
        return data


class RoleForm(forms.Form):
    """The role to give an existing user."""

    role = forms.ChoiceField(choices=[(r, r) for r in ROLES])


def _page(request: HttpRequest, **extra: Any) -> HttpResponse:
    q = request.GET.get("q", "").strip()
    tokens = (AgentToken.live().select_related("host")
              .order_by("host__hostname", "-created_at"))
    if q:
        tokens = tokens.filter(host__hostname__icontains=q)
    users = get_user_model().objects.order_by("username").prefetch_related(
        Prefetch("groups"), "user_permissions")
    context = {
        "secrets": EnrollmentSecret.objects.order_by("revoked_at", "-created_at")[:100],
        "pending": AgentToken.objects.filter(pending=True, revoked_at=None).exclude(
            secret__revoked_at__isnull=False).select_related("host", "secret")
        .order_by("-created_at")[:100],
        "tokens": Paginator(tokens, TOKENS_PER_PAGE).get_page(request.GET.get("page")),
        "users": [(u, role_of(u)) for u in users[:500]], "roles": ROLES, "q": q,
        "secret_form": SecretForm(), "user_form": UserForm(),
        "max_secret_uses": MAX_SECRET_USES, "max_secret_hours": MAX_SECRET_TTL_H,
    }
    context.update(extra)
    return render(request, "front/settings.html", context)


@never_cache
@permits("manage_users")
def settings_index(request: HttpRequest) -> HttpResponse:
    """The settings page."""
    return _page(request)


@never_cache  # the answer shows the new secret once
@permits("manage_secrets")
@require_POST
def secret_create(request: HttpRequest) -> HttpResponse:
    """Create an enrollment secret and show its plaintext this once."""
    form = SecretForm(request.POST)
    if not form.is_valid():
        return _page(request, secret_form=form)
    hours = form.cleaned_data.get("valid_hours")
    row, plaintext = EnrollmentSecret.create(
        form.cleaned_data["name"], max_uses=form.cleaned_data.get("max_uses"),
        valid_for=timedelta(hours=hours) if hours else None)
    return _page(request, new_secret=plaintext, new_secret_row=row)


@never_cache
@permits("manage_secrets")
def secret_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """What one enrollment secret enrolled: every token it minted, with its host, when,
    from where, and whether it is live, pending approval or revoked (newest first)."""
    secret = get_object_or_404(EnrollmentSecret, pk=pk)
    tokens = (secret.tokens.select_related("host").order_by("-created_at", "-pk"))
    page = Paginator(tokens, TOKENS_PER_PAGE).get_page(request.GET.get("page"))
    hosts = secret.tokens.values("host").distinct().count()
    return render(request, "front/secret_detail.html",
                  {"secret": secret, "tokens": page, "hosts": hosts})


@permits("manage_secrets")
@require_POST
def secret_revoke(request: HttpRequest, pk: int) -> HttpResponse:
    """Revoke an enrollment secret: agents can no longer enroll with it."""
    secret = get_object_or_404(EnrollmentSecret, pk=pk, revoked_at=None)
    count = secret.revoke()
    messages.success(request, f"Enrollment secret {secret.name} revoked, with the {count} "
                              "host token(s) it issued.")
    return redirect("fleet:settings")


@permits("manage_tokens")
@require_POST
def enrollment_decide(request: HttpRequest, pk: int, decision: str) -> HttpResponse:
    """Approve (the new token goes live, the host's older tokens are revoked) or deny (the
    pending token is revoked) a re-enrollment of a machine that had a live token."""
    if decision not in ("approve", "deny"):
        raise Http404("unknown decision")
    token = get_object_or_404(AgentToken.objects.select_related("host"), pk=pk,
                              pending=True, revoked_at=None)
    if decision == "approve":
        revoked = token.approve()
        messages.success(request, f"Re-enrollment of {token.host.hostname} approved; "
                                  f"{revoked} older token(s) revoked.")
    else:
        token.revoke()
        messages.success(request, f"Re-enrollment of {token.host.hostname} denied.")
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
    elif user.is_superuser and form.cleaned_data["role"] != "admin":
        # A superuser holds every right whatever its group: "viewer" would change nothing.
        messages.error(request, f"{user.username} is a superuser and stays an admin whatever "
                                "the role; only a superuser can remove that in the Django admin.")
    else:
        set_role(user, form.cleaned_data["role"])
        messages.success(request, f"{user.username} is now {form.cleaned_data['role']}.")
    return redirect("fleet:settings")


@permits("manage_users")
@require_POST
def user_active(request: HttpRequest, pk: int) -> HttpResponse:
    """Deactivate (``active=0``) or reactivate (``active=1``) a user's login.

    A deactivated user cannot sign in and its open sessions stop working (Django's
    ModelBackend refuses inactive users). Nobody deactivates themselves, and only a
    superuser deactivates a superuser.
    """
    user = get_object_or_404(get_user_model(), pk=pk)
    active = request.POST.get("active") == "1"
    if user.pk == request.user.pk:
        messages.error(request, "You cannot deactivate yourself.")
    elif user.is_superuser and not request.user.is_superuser:
        messages.error(request, f"Only a superuser can deactivate {user.username}.")
    else:
        user.is_active = active
        user.save(update_fields=["is_active"])
        messages.success(request, f"{user.username} {'reactivated' if active else 'deactivated'}.")
    return redirect("fleet:settings")
