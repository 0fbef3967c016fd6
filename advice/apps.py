"""Django app config for the advice app."""

from django.apps import AppConfig


class AdviceConfig(AppConfig):
    """Recommended vLLM configurations and the upgrade planner (no models of its own)."""

    name = "advice"
    verbose_name = "Advice"
