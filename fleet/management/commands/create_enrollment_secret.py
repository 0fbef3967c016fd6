"""``manage.py create_enrollment_secret NAME [--uses N] [--valid-hours H | --valid-days D]``:
print a new enrollment secret once.

Defaults: ``ENROLL_SECRET_MAX_USES`` uses (1) and ``ENROLL_SECRET_TTL_H`` hours (24), right
for enrolling one machine by hand. An autoscaled node pool enrolls every new node with the
same secret: give it the uses and lifetime of the pool, e.g. ``--uses 100000 --valid-days
365``, and rotate it (a new secret in the cluster's Secret, then revoke the old one in
Settings, which also revokes every token it minted) before it expires.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from fleet.models import MAX_SECRET_TTL_H, MAX_SECRET_USES, EnrollmentSecret


class Command(BaseCommand):
    help = ("Create an enrollment secret for agents; it is printed once and stored hashed. "
            "For a node pool: --uses 100000 --valid-days 365.")

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("name", help="what the secret is for, e.g. 'rack-a', 'pool-h100'")
        parser.add_argument("--uses", type=int, default=None,
                            help=f"machines it may enroll, 1 to {MAX_SECRET_USES} "
                                 "(default ENROLL_SECRET_MAX_USES)")
        lifetime = parser.add_mutually_exclusive_group()
        lifetime.add_argument("--valid-hours", type=int, default=None,
                              help=f"hours it stays valid, 1 to {MAX_SECRET_TTL_H} "
                                   "(default ENROLL_SECRET_TTL_H)")
        lifetime.add_argument("--valid-days", type=int, default=None,
                              help=f"days it stays valid, 1 to {MAX_SECRET_TTL_H // 24}")

    def handle(self, *args: Any, **options: Any) -> None:
        hours = options["valid_hours"]
        if options["valid_days"] is not None:
            hours = options["valid_days"] * 24
        try:
            row, plaintext = EnrollmentSecret.create(
                options["name"], max_uses=options["uses"],
                valid_for=timedelta(hours=hours) if hours is not None else None)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(plaintext)
        self.stderr.write(f"{row.name}: {row.max_uses} use(s), valid until "
                          f"{row.expires_at:%Y-%m-%d %H:%M} UTC")
