"""Baseline settings: the product's settings (same middleware, database, cache) with the
baseline's URLs only, so the difference to the product is the ingest code itself."""

from config.settings import *  # noqa: F403  (the product's settings, unchanged)

ROOT_URLCONF = "baseline_app.urls"
