"""vLLM Fleet Audit node agent.

Installs with pip alone (no Django, Celery or psycopg). It owns the wire
schema (:mod:`fleet_agent.schema`) that the dashboard imports to validate
reports, so agent and server can never disagree on the contract.
"""

__version__ = "0.1.0"
