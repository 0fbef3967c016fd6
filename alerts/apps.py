"""Django app config for the alerts app."""

from django.apps import AppConfig


class AlertsConfig(AppConfig):
    """Alert channels, grouping and delivery of the audit app's finding events
    (docs/architecture.md). Its models kept their ``audit_*`` tables when they moved here."""

    name = "alerts"
    verbose_name = "Alerts"

    def ready(self) -> None:
        from django.db.models.signals import post_save

        from alerts.alert_tasks import on_finding_event, on_findings_evaluated
        from alerts.kb_alerts import send_kb_alert
        from audit.models import FindingEvent
        from audit.signals import findings_evaluated, kb_attention

        findings_evaluated.connect(on_findings_evaluated, dispatch_uid="alerts.dispatch")
        post_save.connect(on_finding_event, sender=FindingEvent,
                          dispatch_uid="alerts.alertmanager_mute")
        kb_attention.connect(send_kb_alert, dispatch_uid="alerts.kb_attention")
