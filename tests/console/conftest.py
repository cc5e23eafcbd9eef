"""A `treadle serve` subprocess per module (tests/client/served.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.client.served import served
from tests.support.e2e import ServerProcess


@pytest.fixture(scope="module")
async def server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ServerProcess]:
    async with served(Path(tmp_path_factory.mktemp("console")), "console") as srv:
        yield srv
