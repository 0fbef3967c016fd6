"""``manage.py demo_seed``: a demo user, an enrollment secret, and sample hosts via the API.

Idempotent: re-running keeps one user, one live demo secret and one live token per
demo host (earlier ones are revoked) and adds one fresh report per sample host, so
"last seen" is current. Reports go through the real ingest API (Django's test
client: the full middleware and view stack, no socket), never straight into the ORM.
A later fleet simulator may replace this command.
"""

from __future__ import annotations

import gzip
import json
import uuid
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.test import Client
from django.utils import timezone

from fleet.models import AgentToken, EnrollmentSecret

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
DEMO_SECRET_NAME = "demo"  # noqa: S105  (a label, not the secret)


class Command(BaseCommand):
    help = "Create user demo/demo and post the sample reports in fleet/fixtures through the API."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--user", default="demo", help="login name (password = same)")

    def handle(self, *args: Any, **options: Any) -> None:
        self._ensure_user(options["user"])
        EnrollmentSecret.objects.filter(name=DEMO_SECRET_NAME, revoked_at=None).update(
            revoked_at=timezone.now())
        _, secret = EnrollmentSecret.create(DEMO_SECRET_NAME)
        client = Client(SERVER_NAME=(settings.ALLOWED_HOSTS or ["localhost"])[0].lstrip("."))
        paths = sorted(FIXTURES.glob("*.json"))
        if not paths:
            raise CommandError(f"no sample reports in {FIXTURES}")
        for i, path in enumerate(paths):
            self._post(client, secret, json.loads(path.read_text()), gzipped=i % 2 == 1)
        self.stdout.write(f"Enrollment secret for curl (shown once): {secret}")

    def _ensure_user(self, username: str) -> None:
        user, created = get_user_model().objects.get_or_create(
            username=username, defaults={"is_staff": True, "is_superuser": True})
        if created:
            user.set_password(username)  # demo only: password = login name
            user.save()
            self.stdout.write(f"Created user {username}/{username}")

    def _post(self, client: Client, secret: str, report: dict[str, Any], gzipped: bool) -> None:
        host = report["host"]
        AgentToken.objects.filter(host__machine_id=host["machine_id"], revoked_at=None).update(
            revoked_at=timezone.now())
        enrolled = client.post("/api/v1/enroll", {"secret": secret, "machine_id": host[
            "machine_id"], "hostname": host["hostname"]}, content_type="application/json")
        if enrolled.status_code != 201:
            raise CommandError(f"enroll {host['hostname']}: {enrolled.status_code} "
                               f"{enrolled.content[:300]!r}")
        body = json.dumps(_refresh(report)).encode()
        headers = {"Authorization": f"Bearer {enrolled.json()['token']}"}
        if gzipped:
            body, headers["Content-Encoding"] = gzip.compress(body), "gzip"
        answer = client.post("/api/v1/reports", body, content_type="application/json",
                             headers=headers)
        if answer.status_code != 202:
            raise CommandError(f"report {host['hostname']}: {answer.status_code} "
                               f"{answer.content[:300]!r}")
        self.stdout.write(f"Posted {host['hostname']}: {len(report['servers'])} server(s), "
                          f"{len(report['gpus'])} GPU(s){' (gzip)' if gzipped else ''}")


def _refresh(report: dict[str, Any]) -> dict[str, Any]:
    """A new report_id and current timestamps, so each run is a new collection cycle."""
    now = timezone.now().isoformat().replace("+00:00", "Z")
    fresh = json.loads(json.dumps(report))
    fresh["report_id"], fresh["collected_at"] = str(uuid.uuid4()), now
    for server in fresh["servers"]:
        if server.get("metrics"):
            server["metrics"]["scraped_at"] = now
    return fresh
