"""``manage.py demo_seed``: a demo user, an enrollment secret, and sample hosts via the API.

Idempotent: re-running keeps one user, one live demo secret and one live token per
demo host (earlier ones are revoked) and adds one fresh report per sample host, so
"last seen" is current. Reports go through the real ingest API (Django's test
client: the full middleware and view stack, no socket), never straight into the ORM.

``make demo`` runs it with ``--no-fixtures`` (the fleet simulator, ``simulate_fleet``,
reports instead) and with ``--alert-email`` / ``--alert-webhook``, which create or update
one email and one webhook alert channel (subscribed to risky upgrades and silent hosts;
the webhook also to new findings and live-metric alarms). The user is put in the admin
role (:func:`fleet.access.set_role`).
"""

from __future__ import annotations

import gzip
import json
import uuid
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.test import Client
from django.utils import timezone

from fleet.access import ensure_roles, set_role
from fleet.models import AgentToken, EnrollmentSecret

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
DEMO_CHANNELS = {"email": "Demo ops mailbox", "webhook": "Demo webhook receiver"}
DEMO_SECRET_NAME = "demo"  # noqa: S105  (a label, not the secret)


class Command(BaseCommand):
    help = "Create user demo/demo and post the sample reports in fleet/fixtures through the API."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--user", default="demo", help="login name (password = same)")
        parser.add_argument("--no-fixtures", action="store_true",
                            help="do not post the sample reports (the simulator reports)")
        parser.add_argument("--alert-email", help="address of the demo email alert channel")
        parser.add_argument("--alert-webhook", help="URL of the demo webhook alert channel")

    def handle(self, *args: Any, **options: Any) -> None:
        self._ensure_user(options["user"])
        for kind, destination in (("email", options["alert_email"]),
                                  ("webhook", options["alert_webhook"])):
            if destination:
                self._channel(kind, destination)
        if options["no_fixtures"]:
            return
        EnrollmentSecret.objects.filter(name=DEMO_SECRET_NAME, revoked_at=None).update(
            revoked_at=timezone.now())
        client = Client(SERVER_NAME=(settings.ALLOWED_HOSTS or ["localhost"])[0].lstrip("."))
        paths = sorted(FIXTURES.glob("*.json"))
        if not paths:
            raise CommandError(f"no sample reports in {FIXTURES}")
        _, secret = EnrollmentSecret.create(DEMO_SECRET_NAME, max_uses=len(paths))
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
        ensure_roles()
        set_role(user, "admin")

    def _channel(self, kind: str, destination: str) -> None:
        """Create or update the demo channel of ``kind`` (validated like the settings form)."""
        from alerts.models import AlertChannel, Trigger

        triggers = [Trigger.RISKY_UPGRADE, Trigger.HOST_SILENT]
        if kind == "webhook":
            triggers += [Trigger.NEW_FINDING, Trigger.METRIC_ALARM]
        name = DEMO_CHANNELS[kind]
        channel = AlertChannel.objects.filter(name=name).first() or AlertChannel(name=name)
        channel.kind, channel.destination, channel.triggers = kind, destination, triggers
        channel.min_severity, channel.enabled = "high", True
        channel.failing_since, channel.failure_reason = None, ""
        try:
            channel.full_clean()
        except ValidationError as exc:
            raise CommandError(f"demo {kind} channel: {exc}") from None
        channel.save()
        self.stdout.write(f"Alert channel {name!r} -> {channel.destination}")

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
