"""``manage.py make_roles [--user NAME --role viewer|operator|admin]``.

Creates (or repairs) the viewer/operator/admin groups with their permissions
(:mod:`fleet.access`), and optionally puts one existing user in a role. Idempotent.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from fleet.access import ROLE_PERMISSIONS, ROLES, ensure_roles, set_role


class Command(BaseCommand):
    help = "Create the viewer/operator/admin groups; optionally assign a user a role."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--user", help="username to assign a role to")
        parser.add_argument("--role", choices=ROLES, help="role for --user")

    def handle(self, *args: Any, **options: Any) -> None:
        ensure_roles()
        for role in ROLES:
            perms = ", ".join(ROLE_PERMISSIONS[role]) or "read only"
            self.stdout.write(f"{role}: {perms}")
        if bool(options["user"]) != bool(options["role"]):
            raise CommandError("--user and --role go together")
        if options["user"]:
            try:
                user = get_user_model().objects.get(username=options["user"])
            except get_user_model().DoesNotExist:
                raise CommandError(f"no user {options['user']!r}") from None
            set_role(user, options["role"])
            self.stdout.write(f"{user.username} is now {options['role']}")
