"""Trigger tests: a migrated database of each test's own (the sweeper fires across tenants, so
tests must not see each other's schedules) and runtimes on it. Helpers (the agents and channels
of their treadle.yaml, the API in-process) live in tests/support/triggers.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import pytest

from tests.support.db import TEST_HOME
from tests.support.triggers import AGENTS, CHANNELS
from treadle.testing import open_test_runtime


@pytest.fixture
async def open_rt(migrated_db_url: str) -> AsyncIterator[Any]:
    """`await open_rt(extra_config=None, inline=True, **settings)` → (runtime, dispatcher)."""
    async with AsyncExitStack() as stack:

        async def factory(extra: dict[str, Any] | None = None, *, inline: bool = True, **settings: Any) -> Any:
            config = {"agents": AGENTS, "channels": CHANNELS, **(extra or {})}
            agents = config.pop("agents")
            return await stack.enter_async_context(open_test_runtime(
                agents, database_url=migrated_db_url, config=config, inline=inline, home=TEST_HOME, **settings
            ))

        yield factory
