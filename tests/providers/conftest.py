"""Fixtures for the provider tests: fake vendor servers on loopback, and treadle runtimes (real
Postgres, inline dispatcher) whose config points at them. Nothing here reaches the internet.
Helpers (the vendors by kind, the harness) live in tests/support/providers.py."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import pytest

from tests.support.db import TEST_HOME
from tests.support.providers import VENDORS, Harness, MakeHarness, StartVendor, Vendor
from treadle.testing import open_test_runtime


@pytest.fixture
async def vendor(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[StartVendor]:
    """`await vendor(kind)` → a started fake vendor whose key is in a fresh environment variable."""
    started: list[Vendor] = []

    async def start(kind: str, **fake_kw: Any) -> Vendor:
        cls, driver, model, suffix = VENDORS[kind]
        fake = cls(**fake_kw)
        await fake.server.start()
        env = f"TREADLE_TEST_{kind.upper()}_KEY_{secrets.token_hex(3).upper()}"
        if fake.key:
            monkeypatch.setenv(env, fake.key)
        v = Vendor(kind, fake, driver, model, env, suffix)
        started.append(v)
        return v

    yield start
    for v in started:
        await v.fake.server.close()


@pytest.fixture
async def treadle(db_url: str) -> AsyncIterator[MakeHarness]:
    """`await treadle(config_dict, providers=None, **settings)` → a Harness over a runtime with that
    config (treadle.yaml as a dict) and, optionally, extra provider instances by id."""
    async with AsyncExitStack() as stack:

        async def factory(config: dict[str, Any], providers: dict[str, Any] | None = None, **settings: Any) -> Harness:
            rest = {k: v for k, v in config.items() if k != "agents"}
            rt, disp = await stack.enter_async_context(open_test_runtime(
                config.get("agents", {}), database_url=db_url, config=rest, providers=providers,
                **{"home": TEST_HOME, "chain_steps": 8, **settings},  # treadle's default chaining
            ))
            return Harness(rt, disp)

        yield factory
