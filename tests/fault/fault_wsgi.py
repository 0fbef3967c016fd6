"""The project's WSGI app for the fault tests' gunicorn, with one test-only change.

``Retry-After`` on a database outage is ``INGEST_RETRY_AFTER_S`` (30 s in
production); agents honour it, so the tests shorten it to ``$FAULT_RETRY_AFTER_S``
seconds to stay bounded. Everything else is ``config.wsgi`` unchanged.
"""

from __future__ import annotations

import os

from django.conf import settings

from config.wsgi import application

settings.INGEST_RETRY_AFTER_S = int(os.environ.get("FAULT_RETRY_AFTER_S", "30"))

__all__ = ["application"]
