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
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest


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


class RefuseNulQueryMiddleware:
    """Answer 400 for a NUL character in any query parameter's name or value.

    PostgreSQL text cannot hold NUL: a ``?q=%00`` reaching a filter raised DataError (a 500)
    on every page that searches. No real query holds one, so the request is refused before
    any view runs."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if any("\x00" in key or any("\x00" in v for v in values)
                for key, values in request.GET.lists()):
            return HttpResponseBadRequest("A query parameter contains a NUL character (%00).",
                                          content_type="text/plain")
        return self.get_response(request)
