"""The Celery app. Settings come from ``config.settings`` under the ``CELERY_`` prefix.

Run a worker with ``celery -A config worker -Q evaluate,alerts,default`` and the
scheduler with ``celery -A config beat``.
"""

import os

from celery import Celery

# The settings module is the one variable Django itself needs before settings load.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("fleet_audit", task_cls="celery.contrib.django.task:DjangoTask")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
# The alert tasks live in alerts/alert_tasks.py, which the default discovery (tasks.py)
# does not import: a worker serving only the `alerts` queue must still know them.
app.autodiscover_tasks(related_name="alert_tasks")
