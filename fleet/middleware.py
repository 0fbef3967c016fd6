"""Response headers Django's SecurityMiddleware does not set: the Content-Security-Policy.

Django 5.2 has no built-in CSP. The policy (``settings.CONTENT_SECURITY_POLICY``) allows
scripts, styles and images from this origin only: the pages load Chart.js, htmx and
``static/js/ui.js`` from static files, pass data with ``json_script`` (a JSON data block,
not a script CSP governs) and carry no inline ``<script>``, ``style=`` or ``on*=``
attributes. A view that sets its own policy keeps it.
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse


class ContentSecurityPolicyMiddleware:
    """Add ``Content-Security-Policy`` to every response that has none."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        policy = getattr(settings, "CONTENT_SECURITY_POLICY", "")
        if policy and "Content-Security-Policy" not in response:
            response["Content-Security-Policy"] = policy
        return response
