"""Celery app for the alert worker tests: the project's app, tuned so faults heal fast.

Started as ``celery -A alerts_worker_app worker -Q alerts`` (PYTHONPATH includes this
folder). Differences from production, all test-only:

- broker visibility timeout 3 s with a restore sweep every second, so a task held by
  a SIGKILLed worker is redelivered within seconds, not minutes;
- retry backoff 0.2 s doubling to 1 s, claim lease 1 s, local destinations allowed;
- a ``gated-webhook`` transport that, before sending, touches
  ``$ALERT_TEST_GATE_DIR/entered-<pid>`` and waits for ``$ALERT_TEST_GATE_DIR/open``:
  the test kills the worker while it waits, i.e. after claiming, before sending.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

from config.celery import app  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402

settings.ALERTS_ALLOW_PRIVATE_WEBHOOKS = True
settings.ALERT_RETRY_BASE_S = 0.2
settings.ALERT_RETRY_MAX_S = 1.0
settings.ALERT_CLAIM_LEASE_S = 1.0
app.conf.broker_transport_options = {"visibility_timeout": 3, "unacked_restore_interval": 1,
                                     "unacked_restore_throttle": 1}

import alerts.alert_tasks  # noqa: E402, F401  (registers the alerts.* tasks)
from alerts.transports import AlertMessage, register  # noqa: E402
from alerts.transports.webhook import WebhookTransport  # noqa: E402

GATE = Path(os.environ.get("ALERT_TEST_GATE_DIR", "/nonexistent"))


@register
class GatedWebhookTransport(WebhookTransport):
    """The webhook transport, held at a gate just before it sends."""

    kind = "gated-webhook"
    label = "Webhook behind a test gate"

    def notify(self, message: AlertMessage) -> int | None:
        (GATE / f"entered-{os.getpid()}").touch()
        deadline = time.monotonic() + 120
        while not (GATE / "open").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        return super().notify(message)
