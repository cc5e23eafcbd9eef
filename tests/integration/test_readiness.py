"""GET /readyz (issue 43 item 7): ready only when the runtime is open, its database answers and
every migration this version ships is applied — 503 saying which otherwise; /healthz stays
liveness (it answers without a database)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.db import clone_database, drop_database
from tests.support.e2e import execute
from treadle.api.app import create_app
from treadle.store.migrate import available_migrations
from treadle.testing import open_test_runtime


@pytest.fixture
def db(server_url: str, migrated_template: str) -> Iterator[str]:
    url = clone_database(server_url, migrated_template, "ready")
    yield url
    drop_database(server_url, url)


def client(app: object) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://treadle.test")  # type: ignore[arg-type]


async def test_ready_pending_unreachable_and_not_open(db: str, tmp_path: Path) -> None:
    app = create_app(auth_token="s3cret", max_request_bytes=1 << 20)
    async with client(app) as c:
        app.state.runtime = None  # a shape still opening its runtime
        resp = await c.get("/readyz")
        assert (resp.status_code, resp.json()["database"]) == (503, "not_open")
        assert (await c.get("/healthz")).status_code == 200  # liveness all the same

        async with open_test_runtime({"echo": {"model": "echo"}}, database_url=db, home=tmp_path) as (rt, _):
            app.state.runtime = rt
            resp = await c.get("/readyz")  # no bearer needed: a probe's route
            assert resp.status_code == 200 and resp.json()["ok"] is True, resp.text
            assert resp.json()["pending_migrations"] == []

            last = available_migrations()[-1].version
            await execute(db, f"DELETE FROM treadle_migrations WHERE version = {last}")  # a newer treadle's
            resp = await c.get("/readyz")
            assert (resp.status_code, resp.json()["pending_migrations"]) == (503, [last])

            await rt.pool.close()  # the database gone from under it
            resp = await c.get("/readyz")
            assert (resp.status_code, resp.json()["database"]) == (503, "unreachable")
