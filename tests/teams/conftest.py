"""Team test fixtures: a migrated database of each test's own and runtimes on it."""

from __future__ import annotations

from tests.support.substrate import open_rt as open_rt
