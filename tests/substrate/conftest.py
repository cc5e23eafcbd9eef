"""Substrate test fixtures: a fresh migrated database per test (HTTP calls all act as the tenant
"default") and runtimes on it. Helpers live in substrate_support.py."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from treadle.store.migrate import migrate

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from substrate_support import (  # noqa: E402
    InlineDispatcher,
    Runtime,
    drop_database,
    new_database,
    open_runtime,
)


@pytest.fixture
async def sub_db(server_url: str) -> AsyncIterator[str]:
    url = new_database(server_url, "sub")
    await migrate(url)
    yield url
    drop_database(server_url, url)


@pytest.fixture
async def open_rt(sub_db: str) -> AsyncIterator[Any]:
    """`await open_rt(config_dict, providers=None)` → (runtime, inline dispatcher)."""
    opened: list[Runtime] = []

    async def factory(config: dict[str, Any], **kw: Any) -> tuple[Runtime, InlineDispatcher]:
        rt, disp = await open_runtime(sub_db, config, **kw)
        opened.append(rt)
        return rt, disp

    yield factory
    for rt in opened:
        await rt.close()


