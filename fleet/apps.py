"""Django app config for the fleet app."""

from django.apps import AppConfig


class FleetConfig(AppConfig):
    """Registers the fleet system checks (fleet.E001...), the token cache's signal receivers
    and the JSON reading of new database connections when Django starts."""

    name = "fleet"
    verbose_name = "Fleet"

    def ready(self) -> None:
        from django.db.backends.signals import connection_created

        from fleet import checks  # noqa: F401  (registers the checks)
        from fleet.jsonread import read_json_columns
        from fleet.token_cache import connect_signals

        connect_signals()  # the ingest's token cache forgets revoked tokens
        connection_created.connect(read_json_columns, dispatch_uid="fleet.read_json_columns")
