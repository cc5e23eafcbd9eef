"""Postgres persistence: the pool, numbered migrations, and one module per aggregate."""
