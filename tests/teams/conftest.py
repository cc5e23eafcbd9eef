"""Team test fixtures: a migrated database of each test's own and runtimes on it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import pytest

from tests.support.substrate import substrate_runtime


@pytest.fixture
async def open_rt(migrated_db_url: str) -> AsyncIterator[Any]:
    """`await open_rt(config_dict, providers=None)` → (runtime, inline dispatcher)."""
    async with AsyncExitStack() as stack:

        async def factory(config: dict[str, Any], **kw: Any) -> Any:
            return await stack.enter_async_context(substrate_runtime(migrated_db_url, config, **kw))

        yield factory
