"""Celery app for the fault tests' workers: the project's app plus two test-only hooks.

Started as ``celery -A fault_worker_app worker`` (PYTHONPATH holds this folder).

- ``$FAULT_VISIBILITY_S`` (optional): broker visibility timeout in seconds, with the
  unacked-restore sweep every second, so a task held by a SIGKILLed worker is
  redelivered within seconds. Production's ``CELERY_VISIBILITY_TIMEOUT_MINUTES`` has a
  floor of one minute, and kombu's default sweep runs only every 10 x 10 s.
- ``$FAULT_EVAL_LOG`` (optional): every evaluation that committed appends
  ``<report_id> <pid>`` to this file, so a test can count evaluations per report.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

from config.celery import app  # noqa: E402

django.setup()

from audit import evaluation  # noqa: E402

_visibility = os.environ.get("FAULT_VISIBILITY_S")
if _visibility:
    app.conf.broker_transport_options = {
        "visibility_timeout": int(_visibility), "unacked_restore_interval": 1,
        "unacked_restore_throttle": 1}

_EVAL_LOG = os.environ.get("FAULT_EVAL_LOG")
if _EVAL_LOG:
    _evaluate = evaluation.evaluate_report

    @functools.wraps(_evaluate)
    def _counted(report_id: Any) -> Any:
        outcomes = _evaluate(report_id)
        if outcomes is not None:  # it claimed the report and its transaction committed
            with open(_EVAL_LOG, "a", encoding="utf-8") as log:
                log.write(f"{report_id} {os.getpid()}\n")
        return outcomes

    evaluation.evaluate_report = _counted
