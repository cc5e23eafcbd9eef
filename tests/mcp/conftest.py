"""A sidecar (real uvicorn on a loopback port, bearer auth) per test module of tests/mcp."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.support.mcp import CONFIG, TOKEN
from tests.support.sidecar import sidecar_settings, sidecar_url


@pytest.fixture(scope="module")
async def base_url(db_url: str) -> AsyncIterator[str]:
    async with sidecar_url(sidecar_settings(db_url, token=TOKEN), CONFIG) as url:
        yield url
