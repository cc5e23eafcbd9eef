"""Knowledge test fixtures: a migrated database of each test's own and runtimes on it; SQL
memory's scopes (whose roles are per cluster) are dropped after each test."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import pytest

from tests.support.substrate import substrate_runtime


@pytest.fixture
async def open_rt(migrated_db_url: str) -> AsyncIterator[Any]:
    """`await open_rt(config_dict, providers=None, url=None)` → (runtime, inline dispatcher); `url`:
    another database than the test's."""
    opened: list[Any] = []
    async with AsyncExitStack() as stack:

        async def factory(config: dict[str, Any], *, url: str | None = None, **kw: Any) -> Any:
            rt, disp = await stack.enter_async_context(substrate_runtime(url or migrated_db_url, config, **kw))
            opened.append(rt)
            return rt, disp

        try:
            yield factory
        finally:
            for rt in opened:
                if rt.sql_memory is not None and rt.sql_memory._ready:
                    await rt.sql_memory.drop_all()
