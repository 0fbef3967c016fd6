"""Django app config for the alerts app."""

from django.apps import AppConfig


class AlertsConfig(AppConfig):
    """Alert channels, grouping and delivery of the audit app's finding events
    (docs/architecture.md). Its models kept their ``audit_*`` tables when they moved here."""

    name = "alerts"
    verbose_name = "Alerts"

    def ready(self) -> None:
        from alerts.alert_tasks import on_findings_evaluated
        from audit.signals import findings_evaluated

        findings_evaluated.connect(on_findings_evaluated, dispatch_uid="alerts.dispatch")
