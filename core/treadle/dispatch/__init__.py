"""Dispatchers carry step messages to workers: Postgres queue (sidecar), SQS (cloud), inline (tests)."""
