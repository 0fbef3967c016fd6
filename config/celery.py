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
