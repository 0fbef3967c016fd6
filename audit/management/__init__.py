"""Management commands of the audit app."""
