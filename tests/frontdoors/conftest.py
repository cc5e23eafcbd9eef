"""One served treadle per test module (tests/support/frontdoors.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.support.frontdoors import Served, served_treadle


@pytest.fixture(scope="module")
async def served(db_url: str) -> AsyncIterator[Served]:
    async with served_treadle(db_url) as s:
        yield s


@pytest.fixture(autouse=True)
def _clean_vendor_scripts(served: Served) -> None:
    served.openai_fake.script.clear()
    served.anthropic_fake.script.clear()
