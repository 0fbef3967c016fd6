"""System checks for deployment settings; ids ``fleet.E00x`` and ``fleet.W00x``."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import Error, Warning, register  # noqa: A004 - Django's name


@register()
def check_secret_key(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """fleet.E001: SECRET_KEY must be set unless DEBUG=true."""
    if getattr(settings, "SECRET_KEY_MISSING", False):
        return [Error("SECRET_KEY is not set (required unless DEBUG=true).",
                      hint="Set SECRET_KEY to a long random string, e.g. "
                           "`python -c 'import secrets; print(secrets.token_urlsafe(50))'`.",
                      id="fleet.E001")]
    if getattr(settings, "SECRET_KEY_IS_PLACEHOLDER", False):
        return [Error("SECRET_KEY is still .env.example's placeholder.",
                      hint="Replace it in .env with a long random string, e.g. "
                           "`python -c 'import secrets; print(secrets.token_urlsafe(50))'`.",
                      id="fleet.E002")]
    return []


@register(deploy=True)
def check_https_behind_proxy(app_configs: Any = None, **kwargs: Any) -> list[Warning]:
    """fleet.W001: an https SITE_URL redirects http to https, which loops forever unless
    Django learns the scheme from our proxy (BEHIND_PROXY=true)."""
    if getattr(settings, "HTTPS", False) and not getattr(settings, "BEHIND_PROXY", False):
        return [Warning("SITE_URL is https but BEHIND_PROXY is false: every request would "
                        "look like plain http and be redirected to https again.",
                        hint="Run behind compose's Caddy proxy (deploy/Caddyfile) or an Ingress "
                             "and set BEHIND_PROXY=true (only "
                             "when the proxy is the sole way to reach gunicorn).",
                        id="fleet.W001")]
    return []
