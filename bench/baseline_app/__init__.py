"""A bare Django app for the ingest baseline: one view inserting report JSON into one table.

Loaded only by ``bench/ingest.py`` (gunicorn with ``bench/`` on the path and
``DJANGO_SETTINGS_MODULE=baseline_app.settings``); never part of the product URLs.
"""
