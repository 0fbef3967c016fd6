"""WSGI entry point for gunicorn (``gunicorn config.wsgi``).

Refuses to start when ``SECRET_KEY`` is missing outside DEBUG (see check fleet.E001),
naming the variable, because sessions signed with a throwaway key would break.
"""

import os

from django.core.exceptions import ImproperlyConfigured
from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

application = get_wsgi_application()

from django.conf import settings  # noqa: E402  (needs the settings module set above)

if settings.SECRET_KEY_MISSING or settings.SECRET_KEY_IS_PLACEHOLDER:
    raise ImproperlyConfigured("SECRET_KEY must be set to serve (or DEBUG=true for a demo)")

# Validate the rules knowledge base at start: a broken rule file stops the server
# with the file and rule named, instead of every evaluation failing later.
from audit.rulebook import current_knowledge_base  # noqa: E402

current_knowledge_base()

# What is loaded by now (Django, the URL conf, the models, the pydantic report schema, the
# knowledge base) lives as long as the worker. Moved out of the cyclic collector's reach
# (gc.freeze, Python docs "gc"), so its full passes stop re-scanning those ~150,000 objects
# every few hundred requests (about a tenth of a steady report's CPU); garbage of the
# start-up itself is collected first.
import gc  # noqa: E402

gc.collect()
gc.freeze()
