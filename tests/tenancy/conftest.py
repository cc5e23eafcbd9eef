"""Tenancy tests: a database of each test's own (tokens switch a whole database out of open
mode) and the API in-process over it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import pytest

from tests.support.db import TEST_HOME
from tests.support.tenancy import AGENTS
from treadle.testing import open_test_runtime


@pytest.fixture
async def tenancy_rt(migrated_db_url: str) -> AsyncIterator[Any]:
    """A runtime (inline dispatcher) on a database of its own; auth lookups are not cached."""
    async with AsyncExitStack() as stack:
        rt, disp = await stack.enter_async_context(open_test_runtime(
            AGENTS, database_url=migrated_db_url, inline=True, home=TEST_HOME, auth_cache_seconds=0,
            config={"channels": {"news": {"scope": "global"}}},
        ))
        yield rt, disp
