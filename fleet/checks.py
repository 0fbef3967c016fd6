"""System checks for deployment settings; ids ``fleet.E00x``."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import Error, register


@register()
def check_secret_key(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """fleet.E001: SECRET_KEY must be set unless DEBUG=true."""
    if getattr(settings, "SECRET_KEY_MISSING", False):
        return [Error("SECRET_KEY is not set (required unless DEBUG=true).",
                      hint="Set SECRET_KEY to a long random string, e.g. "
                           "`python -c 'import secrets; print(secrets.token_urlsafe(50))'`.",
                      id="fleet.E001")]
    return []
