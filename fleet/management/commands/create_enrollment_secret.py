"""``manage.py create_enrollment_secret NAME``: print a new enrollment secret once."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from fleet.models import EnrollmentSecret


class Command(BaseCommand):
    help = "Create an enrollment secret for agents; it is printed once and stored hashed."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("name", help="what the secret is for, e.g. 'rack-a'")

    def handle(self, *args: Any, **options: Any) -> None:
        _, plaintext = EnrollmentSecret.create(options["name"])
        self.stdout.write(plaintext)
