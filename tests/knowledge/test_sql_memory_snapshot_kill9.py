"""A restore that carries SQL-memory scopes survives kill -9 at either side of its commit point
(issue 41 item 5; store/sqlmemrestore.py): a real `treadle serve` is SIGKILLed (1) with the scope
staged in the SQL-memory database and the snapshot's rows mid-transaction — after the restart
neither the rows nor the scope exist, and the staged schema is gone; (2) after the rows committed
and while the scope is being moved into place — after the restart the sweeper finishes it and the
scope holds its tables and rows. Each kill falls inside a sleeping trigger the test waits for
(Postgres reports the backend in it), never by luck."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests.knowledge.test_sql_memory_snapshots import WRITER
from tests.support.chaos import Replica, write_config
from tests.support.db import clone_database, db_name, drop_database
from tests.support.e2e import execute, query, slow_trigger
from tests.support.substrate import TENANT, ok_results, run_agent
from treadle.portable.snapshots import CaptureOptions, capture
from treadle.store.sqlmem import ScopeKey, SqlMemory
from treadle.testing import until

pytestmark = pytest.mark.e2e
SLEEPING = "SELECT pid FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND datname = current_database()"
CONFIG: dict[str, Any] = {"agents": {}, "memory": {"sql": {}}}


@pytest.fixture
def target_url(server_url: str, migrated_template: str) -> Iterator[str]:
    url = clone_database(server_url, migrated_template, "sqlkill")
    yield url
    drop_database(server_url, url)
    with psycopg.connect(server_url, autocommit=True) as conn:  # its SQL-memory database beside it
        conn.execute(f'DROP DATABASE IF EXISTS "{db_name(url)}_sqlmem" WITH (FORCE)')


async def _kill_inside(srv: Replica, doc: dict[str, Any], url: str) -> None:
    """POST the restore, SIGKILL the server once a backend of `url` sleeps in the trigger, and end
    that backend (the dead client's statement would sleep on)."""
    async with httpx.AsyncClient(base_url=srv.url, timeout=120) as c:
        restoring = asyncio.create_task(c.post("/v1/_snapshots/any/restore",
                                                       json={"json": doc, "include_history": True}))

        async def inside() -> bool:
            return bool(await query(url, SLEEPING))

        await until(inside, timeout=120, interval=0.02, what="the restore inside the sleeping trigger")
        srv.kill9()
        with contextlib.suppress(httpx.HTTPError):
            await restoring
    for row in await query(url, SLEEPING):
        await execute(url, f"SELECT pg_terminate_backend({int(row['pid'])})")


async def test_a_restore_killed_before_or_after_its_commit_leaves_nothing_or_everything(
    open_rt: Any, target_url: str, tmp_path: Path
) -> None:
    src, disp = await open_rt({"agents": {"keeper": WRITER}, "memory": {"sql": {}}})
    await ok_results(src, (await run_agent(src, disp, "keeper")).id)
    snap = await capture(src.snapshots, None, CaptureOptions(include_history=True), src.sql_snapshots)
    doc = snap.json_content
    assert doc is not None and len(doc["sections"]["sql_memory"]["entries"]) == 1

    host = SqlMemory(target_url)  # the target's SQL-memory database, made before the server starts
    await host.open()
    sqlmem = host.url
    schema = host.names(ScopeKey(TENANT, "agent", "keeper"))[0]
    srv = Replica(name="sqlsnapkill", database_url=target_url, workdir=tmp_path,
                  config_path=write_config(tmp_path / "treadle.yaml", CONFIG),
                  env={"TREADLE_SWEEP_INTERVAL_SECONDS": "0.3"})

    async def counts() -> tuple[int, int, int, int]:
        main = await query(target_url, "SELECT (SELECT count(*) FROM runs) AS runs,"
                                       " (SELECT count(*) FROM snapshot_sql_restores) AS journal")
        side = await query(sqlmem, "SELECT (SELECT count(*) FROM treadle_sqlmem.staged) AS staged,"
                                   " (SELECT count(*) FROM treadle_sqlmem.scopes) AS scopes")
        return int(main[0]["runs"]), int(main[0]["journal"]), int(side[0]["staged"]), int(side[0]["scopes"])

    # (1) killed inside the rows' transaction, the scope staged: nothing, once the sweeper has passed
    await execute(target_url, slow_trigger("sq_slow_runs", 600, "INSERT ON runs"))
    srv.start()
    try:
        await srv.wait_ready()
        await _kill_inside(srv, doc, target_url)
        await execute(target_url, "DROP TRIGGER sq_slow_runs ON runs")
        assert await counts() == (0, 0, 1, 0)  # staged, nothing committed
        await srv.restart()

        async def undone() -> bool:
            return await counts() == (0, 0, 0, 0)

        await until(undone, timeout=120, interval=0.2, what="the sweeper to drop the staged scope")
        assert await query(sqlmem, "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'r%%' || %s",
                           (schema.removeprefix("s_"),)) == []

        # (2) killed after the rows committed, moving the scope into place: everything, after the restart
        await execute(sqlmem, slow_trigger("sq_slow_scopes", 600, "INSERT ON treadle_sqlmem.scopes"))
        await _kill_inside(srv, doc, sqlmem)
        await execute(sqlmem, "DROP TRIGGER sq_slow_scopes ON treadle_sqlmem.scopes")
        runs, journal, staged, scopes = await counts()
        assert runs >= 1 and journal == 1 and staged == 1 and scopes == 0  # committed, not yet in place
        await srv.restart()

        async def finished() -> bool:
            return (await counts())[2:] == (0, 1)

        await until(finished, timeout=120, interval=0.2, what="the sweeper to move the staged scope in")
        rows = await query(sqlmem, f'SELECT body FROM "{schema}".notes ORDER BY id')
        assert [r["body"] for r in rows][1:] == ["plain"] and len(rows) == 2
        assert await query(sqlmem, f'SELECT name FROM "{schema}".owner_counts ORDER BY name') == [
            {"name": "ann"}, {"name": "bob"}]
    finally:
        srv.stop()
        await host.drop_all()
