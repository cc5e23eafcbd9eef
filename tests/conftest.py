"""Shared fixtures: a real Postgres (DATABASE_URL, else the embedded pgserver), databases (empty,
or migrated: cloned from a template migrated once per session), and runtimes wired with the
inline dispatcher or the Postgres queue (treadle.testing.open_test_runtime).

Helpers live in tests/support (import them from there); conftest files only hold fixtures."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AsyncExitStack
from typing import Any

import pytest

from tests.support import db
from treadle.runtime import Runtime
from treadle.testing import open_test_runtime


@pytest.fixture(scope="session")
def server_url() -> str:
    """An admin URL of the Postgres server the tests use."""
    return db.server_url()


@pytest.fixture(scope="session")
async def migrated_template(server_url: str) -> AsyncIterator[str]:
    """The name of a migrated database, closed to connections, that `migrated_db_url` clones."""
    name = await db.create_template(server_url)
    yield name
    db.drop_template(server_url, name)


@pytest.fixture
def fresh_db_url(server_url: str) -> Iterator[str]:
    """A new, EMPTY database (no migrations applied), dropped afterwards."""
    url = db.create_database(server_url, "fresh")
    yield url
    db.drop_database(server_url, url)


@pytest.fixture
def migrated_db_url(server_url: str, migrated_template: str) -> Iterator[str]:
    """A new migrated database of this test's own (a clone of the template), dropped afterwards."""
    url = db.clone_database(server_url, migrated_template)
    yield url
    db.drop_database(server_url, url)


@pytest.fixture(scope="session")
def db_url(server_url: str, migrated_template: str) -> Iterator[str]:
    """One migrated database shared by the session; tests isolate by run id / tenant / key."""
    url = db.clone_database(server_url, migrated_template, "shared")
    yield url
    db.drop_database(server_url, url)


RuntimeFactory = Callable[..., Any]


@pytest.fixture(scope="session")
def moto_url() -> Iterator[str]:
    """moto's server (S3, SQS, Secrets Manager …) on a loopback port, once per session; clients
    give it dummy credentials."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (scripts/test.sh runs the suite on several workers), start the embedded
    Postgres once in the controlling process, before any worker starts: workers then reuse the
    running server instead of racing to initialise one data directory."""
    if not hasattr(config, "workerinput") and config.getoption("numprocesses", None):
        db.server_url()


@pytest.fixture
async def open_runtime(db_url: str) -> AsyncIterator[RuntimeFactory]:
    """`await open_runtime(agents, inline=True, url=None, config=None, **settings)` → (runtime,
    dispatcher), on `url` (default: the shared database); `config` adds top-level treadle.yaml
    sections. Every runtime opened is closed when the test ends."""
    async with AsyncExitStack() as stack:

        async def factory(
            agents: dict[str, Any], *, inline: bool = True, url: str | None = None,
            config: dict[str, Any] | None = None, **settings: Any
        ) -> tuple[Runtime, Any]:
            opened = open_test_runtime(
                agents, database_url=url or db_url, config=config, inline=inline,
                **{"home": db.TEST_HOME, **settings},
            )
            rt, dispatcher = await stack.enter_async_context(opened)
            return rt, dispatcher

        yield factory
