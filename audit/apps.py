"""Django app config for the audit app."""

from django.apps import AppConfig


class AuditConfig(AppConfig):
    """Evaluation of reports against the rules knowledge base."""

    name = "audit"
    verbose_name = "Audit"

    def ready(self) -> None:
        from audit import checks  # noqa: F401  (registers the system checks)
