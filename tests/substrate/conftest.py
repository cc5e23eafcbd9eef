"""Substrate test fixtures: a migrated database of each test's own (HTTP calls all act as the
tenant "default") and runtimes on it. Helpers live in tests/support/substrate.py."""

from __future__ import annotations

from tests.support.substrate import open_rt as open_rt
