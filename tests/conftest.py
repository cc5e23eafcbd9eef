"""Shared fixtures: a real Postgres (DATABASE_URL, else the embedded pgserver), fresh databases,
and runtimes wired with the inline dispatcher or the Postgres queue."""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from treadle.config import Settings, TreadleConfig, parse_config
from treadle.dispatch.inline import InlineDispatcher
from treadle.runtime import Runtime
from treadle.store.db import resolve_database_url
from treadle.store.migrate import migrate

ROOT = Path(__file__).resolve().parent.parent
TEST_HOME = ROOT / ".treadle" / "test"


@pytest.fixture(scope="session")
def server_url() -> str:
    """An admin URL of the Postgres server the tests use."""
    TEST_HOME.mkdir(parents=True, exist_ok=True)
    return resolve_database_url(os.environ.get("DATABASE_URL"), TEST_HOME)


def create_database(server_url: str, prefix: str = "t") -> str:
    name = f"treadle_{prefix}_{secrets.token_hex(4)}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return make_conninfo(server_url, dbname=name)


def drop_database(server_url: str, url: str) -> None:
    name = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def fresh_db_url(server_url: str) -> Any:
    """A new, empty database (no migrations applied), dropped afterwards."""
    url = create_database(server_url, "fresh")
    yield url
    drop_database(server_url, url)


@pytest.fixture(scope="session")
async def db_url(server_url: str) -> AsyncIterator[str]:
    """One migrated database shared by the session; tests isolate by run id / tenant / key."""
    url = create_database(server_url, "shared")
    await migrate(url)
    yield url
    drop_database(server_url, url)


def make_config(agents: dict[str, Any], extra: dict[str, Any] | None = None) -> TreadleConfig:
    return parse_config({"agents": agents, **(extra or {})})


RuntimeFactory = Callable[..., Any]


@pytest.fixture
async def open_runtime(db_url: str) -> AsyncIterator[RuntimeFactory]:
    """`await open_runtime(agents, inline=True, config=None, **settings)` → (runtime, dispatcher);
    `config` adds top-level treadle.yaml sections."""
    opened: list[Runtime] = []

    async def factory(
        agents: dict[str, Any], *, inline: bool = True, url: str | None = None,
        config: dict[str, Any] | None = None, **settings: Any
    ) -> tuple[Runtime, Any]:
        s = Settings(database_url=url or db_url, home=TEST_HOME, **{"workers": 4, "chain_steps": 1, **settings})
        dispatcher = InlineDispatcher() if inline else None
        rt = await Runtime.open(
            s, make_config(agents, config), dispatcher_factory=(lambda _p, _u: dispatcher) if inline else None
        )
        if inline:
            dispatcher.handler = rt.engine.handle
        opened.append(rt)
        return rt, (dispatcher if inline else rt.dispatcher)

    yield factory
    for rt in opened:
        await rt.close()
