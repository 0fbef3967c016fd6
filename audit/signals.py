"""What judgement tells the apps that consume it (docs/architecture.md).

``findings_evaluated``: a report's evaluation committed its findings and finding events;
sent by ``audit.tasks.evaluate_report`` with keyword arguments ``report_id`` (UUID string)
and ``config_evaluated`` (ids of the servers whose config rules ran: their config
fingerprint changed). The alerts app connects the receiver that schedules its outbox
dispatch; the advice app the one that stores those servers' upgrade plans.

``kb_attention``: the knowledge base needs an operator (stale for the fleet, or an upstream
issue a rule cites changed); keyword arguments ``key`` (once-only key), ``headline``,
``detail``, ``now``. The alerts app's receiver returns the delivery ids it created.
"""

from __future__ import annotations

from django.dispatch import Signal

findings_evaluated = Signal()
kb_attention = Signal()
