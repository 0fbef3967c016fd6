"""Django app config for the front app."""

from django.apps import AppConfig


class FrontConfig(AppConfig):
    """The human pages: overview, host page, findings, knowledge base, versions, settings.

    Composes fleet, audit, advice and alerts; nothing imports it (docs/architecture.md).
    """

    name = "front"
    verbose_name = "Pages"
