"""Roles and the access helpers every dashboard view starts with.

Three roles, each a Django group holding real model permissions, so templates can ask
``perms.audit.change_finding`` on any page (the auth context processor provides
``perms``) and the admin site shows the same truth:

- ``viewer``: read every page (any signed-in user without a role is a viewer);
- ``operator``: viewer + acknowledge/silence findings (``audit.change_finding``) and set a
  server's workload profile (``fleet.change_server``);
- ``admin``: operator + enrollment secrets, host tokens, users and alert channels
  (``fleet.change_enrollmentsecret``, ``fleet.change_agenttoken``, ``auth.change_user``,
  ``alerts.change_alertchannel``). A superuser is always an admin.

Groups are created (idempotently) by ``manage.py make_roles`` and on first use by
:func:`ensure_roles`; no data migration, so the fleet migrations stay the foundation's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import Group, Permission
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.http import HttpRequest, HttpResponse

ROLES = ("viewer", "operator", "admin")

#: Action -> "app_label.codename" permission checked on the server side.
ACTIONS: dict[str, str] = {
    "acknowledge": "audit.change_finding",
    "silence": "audit.change_finding",
    "set_workload": "fleet.change_server",
    "manage_secrets": "fleet.change_enrollmentsecret",
    "manage_tokens": "fleet.change_agenttoken",
    "manage_users": "auth.change_user",
    "manage_alerts": "alerts.change_alertchannel",
    "run_probes": "fleet.change_probepolicy",  # opt-in live probes
}

#: Permissions each role's group holds (cumulative: admin includes operator).
ROLE_PERMISSIONS: dict[str, tuple[str, ...]] = {
    "viewer": (),
    "operator": ("audit.change_finding", "fleet.change_server", "fleet.change_probepolicy"),
    "admin": ("audit.change_finding", "fleet.change_server", "fleet.change_probepolicy",
              "fleet.change_enrollmentsecret",
              "fleet.change_agenttoken", "auth.change_user", "alerts.change_alertchannel",
              "alerts.add_alertchannel", "alerts.view_alertchannel"),
}


def _permission(dotted: str) -> Permission | None:
    app_label, codename = dotted.split(".", 1)
    return Permission.objects.filter(content_type__app_label=app_label,
                                     codename=codename).first()


def ensure_roles() -> dict[str, Group]:
    """Create or repair the three role groups; returns ``{role: Group}``.

    Idempotent; a permission whose model does not exist yet (an app not migrated) is
    skipped rather than failing.
    """
    groups = {}
    with transaction.atomic():
        for role in ROLES:
            group, _ = Group.objects.get_or_create(name=role)
            wanted = [p for p in map(_permission, ROLE_PERMISSIONS[role]) if p is not None]
            group.permissions.set(wanted)
            groups[role] = group
    return groups


def role_of(user: Any) -> str:
    """``"admin"``, ``"operator"`` or ``"viewer"`` for a signed-in user (strongest wins)."""
    if user.is_superuser or user.has_perm(ACTIONS["manage_users"]):
        return "admin"
    if user.has_perm(ACTIONS["acknowledge"]):
        return "operator"
    return "viewer"


def set_role(user: Any, role: str) -> None:
    """Put ``user`` in exactly one role group.

    Admins also get ``is_staff`` (the Django admin and the alert pages check it); other
    roles lose it. A superuser keeps full rights whatever the group. Raises ValueError for
    an unknown role.
    """
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; expected one of {ROLES}")
    groups = ensure_roles()
    with transaction.atomic():
        user.groups.remove(*[g for name, g in groups.items() if name != role])
        user.groups.add(groups[role])
        user.is_staff = role == "admin" or user.is_superuser
        user.save(update_fields=["is_staff"])
    # Django caches permissions on the instance; drop them so the new role applies now.
    for cache in ("_perm_cache", "_user_perm_cache", "_group_perm_cache"):
        user.__dict__.pop(cache, None)


def can(user: Any, action: str) -> bool:
    """True when ``user`` may perform ``action`` (a key of :data:`ACTIONS`)."""
    return bool(user.is_authenticated and user.has_perm(ACTIONS[action]))


def require(request: HttpRequest, action: str) -> None:
    """Raise PermissionDenied (HTTP 403) unless the request's user may do ``action``."""
    if not can(request.user, action):
        raise PermissionDenied(f"your role may not {action.replace('_', ' ')}")


def permits(action: str) -> Callable[[Callable[..., HttpResponse]], Callable[..., HttpResponse]]:
    """View decorator: login required, then :func:`require` ``action`` (403 otherwise)."""
    def decorate(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @functools.wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            require(request, action)
            return view(request, *args, **kwargs)
        return login_required(wrapped)
    return decorate
