"""Django app config for the audit app."""

from django.apps import AppConfig


class AuditConfig(AppConfig):
    """Evaluation of reports against the rules knowledge base."""

    name = "audit"
    verbose_name = "Audit"

    def ready(self) -> None:
        from audit import checks  # noqa: F401  (registers the system checks)
        from audit.tasks import queue_evaluation
        from fleet.signals import report_needs_evaluation

        report_needs_evaluation.connect(queue_evaluation, dispatch_uid="audit.queue_evaluation")
