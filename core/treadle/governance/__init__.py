"""Governance (issue 42): the pure decisions — budgets — the engine's deciders and the API call.
Usage itself is recorded by the database (store/usage.py, migration 0045)."""
