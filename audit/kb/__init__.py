"""Audit knowledge base: pure-Python helpers (no Django) shared by rules, ingest and bench."""
