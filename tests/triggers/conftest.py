"""Trigger tests: a fresh migrated database per test (the sweeper fires across tenants, so
tests must not see each other's schedules), runtimes on it, and the API in-process (ASGI)."""

from __future__ import annotations

import secrets
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from treadle.api.app import create_app
from treadle.config import Settings, parse_config
from treadle.dispatch.inline import InlineDispatcher
from treadle.runtime import Runtime
from treadle.store.migrate import migrate

HERE = Path(__file__).resolve().parent
TEST_HOME = HERE.parents[1] / ".treadle" / "test"
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

AGENTS: dict[str, Any] = {
    "echo": {"model": "echo"},
    "other": {"model": "echo"},
    "listener": {
        "model": "script",
        "tools": ["Channel"],
        "mock": {
            "script": [
                {"tool": "Channel", "input": {"op": "subscribe", "channel": "events", "wait_ms": 600_000}},
                {"text": "heard it"},
            ]
        },
    },
}
CHANNELS: dict[str, Any] = {"events": {"semantic": "broadcast"}, "inbox": {"semantic": "queue"}}


@pytest.fixture
async def trig_db(server_url: str) -> AsyncIterator[str]:
    name = f"treadle_trig_{secrets.token_hex(4)}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = make_conninfo(server_url, dbname=name)
    await migrate(url)
    yield url
    assert conninfo_to_dict(url)["dbname"] == name
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
async def open_rt(trig_db: str) -> AsyncIterator[Any]:
    """`await open_rt(extra_config=None, inline=True, **settings)` → (runtime, dispatcher)."""
    opened: list[Runtime] = []

    async def factory(extra: dict[str, Any] | None = None, *, inline: bool = True, **settings: Any) -> Any:
        config = parse_config({"agents": AGENTS, "channels": CHANNELS, **(extra or {})})
        s = Settings(database_url=trig_db, home=TEST_HOME, **{"workers": 4, "chain_steps": 1, **settings})
        dispatcher = InlineDispatcher() if inline else None
        rt = await Runtime.open(s, config, dispatcher_factory=(lambda _p, _u: dispatcher) if inline else None)
        if dispatcher is not None:
            dispatcher.handler = rt.engine.handle
        opened.append(rt)
        return rt, (dispatcher if inline else rt.dispatcher)

    yield factory
    for rt in opened:
        await rt.close()


def client_for(rt: Runtime, *, token: str | None = None, max_request_bytes: int = 1 << 20) -> httpx.AsyncClient:
    app = create_app(auth_token=token, max_request_bytes=max_request_bytes)
    app.state.runtime = rt
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://treadle.test")
