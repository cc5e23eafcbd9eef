"""One served treadle per test module (tests/support/frontdoors.py), and the official `openai`
client on it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import openai
import pytest

from tests.support.frontdoors import TOKEN, Served, served_treadle


@pytest.fixture(scope="module")
async def served(db_url: str) -> AsyncIterator[Served]:
    async with served_treadle(db_url) as s:
        yield s


@pytest.fixture(autouse=True)
def _clean_vendor_scripts(served: Served) -> None:
    served.openai_fake.script.clear()
    served.anthropic_fake.script.clear()


@pytest.fixture
async def client(served: Served) -> AsyncIterator[openai.AsyncOpenAI]:
    c = openai.AsyncOpenAI(base_url=served.url + "/v1", api_key=TOKEN, max_retries=0)
    yield c
    await c.close()
