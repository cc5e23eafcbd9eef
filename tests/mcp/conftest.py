"""A sidecar (real uvicorn on a loopback port, bearer auth) per test module of tests/mcp."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from treadle_sidecar.server import BackgroundServer

from tests.support.db import TEST_HOME
from tests.support.mcp import CONFIG, TOKEN
from treadle.config import Settings


@pytest.fixture(scope="module")
async def base_url(db_url: str) -> AsyncIterator[str]:
    settings = Settings(database_url=db_url, home=TEST_HOME, config=Path("unused.yaml"), workers=2,
                        auth_token=TOKEN, sweep_interval_seconds=30.0)
    server = BackgroundServer(settings, CONFIG)
    yield await server.start()
    await server.stop()
