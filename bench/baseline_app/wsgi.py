"""WSGI entry point of the baseline (``gunicorn baseline_app.wsgi:application``)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "baseline_app.settings")

application = get_wsgi_application()
