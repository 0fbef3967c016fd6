"""Django app config for the demo fleet (only its management commands: ``demo_seed`` and
``simulate_fleet``). The rest of the package imports no Django, so the agent tests use
the fake nodes without the server packages."""

from django.apps import AppConfig


class DemoConfig(AppConfig):
    """The replayed demo fleet's commands; no models."""

    name = "demo"
    verbose_name = "Demo fleet"
