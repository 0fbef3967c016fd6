"""Django app config for the fleet app."""

from django.apps import AppConfig


class FleetConfig(AppConfig):
    """Registers the fleet system checks (fleet.E001...) and the token cache's signal
    receivers when Django starts."""

    name = "fleet"
    verbose_name = "Fleet"

    def ready(self) -> None:
        from fleet import checks  # noqa: F401  (registers the checks)
        from fleet.token_cache import connect_signals

        connect_signals()  # the ingest's token cache forgets revoked tokens
