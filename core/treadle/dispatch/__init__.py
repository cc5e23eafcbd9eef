"""Dispatchers carry step messages to workers: Postgres queue (sidecar), inline (tests)."""
