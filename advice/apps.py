"""Django app config for the advice app."""

from django.apps import AppConfig


class AdviceConfig(AppConfig):
    """Recommended vLLM configurations and the upgrade planner (stored plans:
    :mod:`advice.models`, written by :mod:`advice.plans` after an evaluation)."""

    name = "advice"
    verbose_name = "Advice"

    def ready(self) -> None:
        from advice.tasks import on_findings_evaluated
        from audit.signals import findings_evaluated

        findings_evaluated.connect(on_findings_evaluated, dispatch_uid="advice.store_plans")
