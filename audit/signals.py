"""What judgement tells the apps that consume it (docs/architecture.md).

``findings_evaluated``: a report's evaluation committed its findings and finding events;
sent with no arguments by ``audit.tasks.evaluate_report``. The alerts app connects the
receiver that schedules its outbox dispatch.
"""

from __future__ import annotations

from django.dispatch import Signal

findings_evaluated = Signal()
