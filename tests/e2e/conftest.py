"""Fixtures for the end-to-end tests: new databases and `treadle serve` subprocesses that are
always stopped (and their databases dropped) when the test ends. On failure pytest shows each
server's log tail, printed at teardown."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.db import clone_database, create_database, drop_database
from tests.support.e2e import ServerProcess, write_config

MakeDb = Callable[..., str]
StartServer = Callable[..., Awaitable[ServerProcess]]


@pytest.fixture
def make_db(server_url: str, migrated_template: str) -> Iterator[MakeDb]:
    """`make_db(prefix, migrated=False)` → the URL of a new database, dropped when the test ends:
    empty (the server migrates it when it starts), or migrated already (a template clone)."""
    made: list[str] = []

    def factory(prefix: str = "e2e", *, migrated: bool = False) -> str:
        url = clone_database(server_url, migrated_template, prefix) if migrated else create_database(server_url, prefix)
        made.append(url)
        return url

    yield factory
    for url in made:
        drop_database(server_url, url)


@pytest.fixture
def start_server(make_db: MakeDb, tmp_path: Path) -> Iterator[StartServer]:
    """`await start_server(database_url, agents, name=..., **env)` → a healthy ServerProcess.

    `agents` is the `agents:` mapping of the operator YAML (`extra_config`: its other sections);
    `env` adds environment variables.
    Every server started here is stopped (SIGTERM, then SIGKILL) before the databases go."""
    servers: list[ServerProcess] = []

    async def factory(database_url: str, agents: dict[str, Any], *, name: str = "treadle",
                      ready_timeout: float = 60.0, extra_config: dict[str, Any] | None = None,
                      **env: str) -> ServerProcess:
        workdir = tmp_path / name
        workdir.mkdir(exist_ok=True)
        config = write_config(workdir / "treadle.yaml", agents, extra_config)
        srv = ServerProcess(database_url=database_url, config_path=config, workdir=workdir, name=name, env=env)
        servers.append(srv)
        srv.start()
        await srv.wait_ready(ready_timeout)
        return srv

    yield factory
    for srv in servers:
        srv.stop()
    for srv in servers:
        print(f"\n===== {srv.name}: {srv.starts} start(s), logs in {srv.workdir}")
        print(srv.log_tail(3000, all_starts=True))
