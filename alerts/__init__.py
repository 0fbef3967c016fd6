"""Alerts: channels, grouping and delivery of finding events (docs/architecture.md)."""
