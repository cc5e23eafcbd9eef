"""A snapshot restore survives kill -9 (issue 36 item 3): a real `treadle serve` is SIGKILLed inside
its restore's transaction (a trigger holds the transcript's insert, and the test waits until
Postgres reports the backend inside it); the database holds none of the snapshot, and after the
restart the same document restores whole and its runs finish."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.chaos import Replica, write_config
from tests.support.e2e import check_paired, execute, query, slow_trigger
from tests.support.tenancy import api
from tests.support.waiting import start
from treadle.testing import until

pytestmark = pytest.mark.e2e

LOOPER: dict[str, Any] = {"model": "tool-caller", "tools": ["Memory"], "mock": {"tool_calls": 2}}
SLEEPING = "SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND datname = current_database()"


async def test_a_restore_killed_half_way_leaves_nothing_and_restores_whole_after_the_restart(
    open_runtime: Any, migrated_db_url: str, target_db: str, tmp_path: Path
) -> None:
    src, disp = await open_runtime({"looper": LOOPER}, url=migrated_db_url)
    runs = [await start(src, "looper") for _ in range(3)]
    await src.engine.handle(disp.queue.pop(0))  # one mid-way; the others queued
    async with api(src) as c:
        snap = (await c.post("/v1/_snapshots", json={})).json()
        doc = (await c.get(f"/v1/_snapshots/{snap['id']}/export")).json()

    await execute(target_db, slow_trigger("sk_slow_events", 2, "INSERT ON events", when="NEW.seq = 1"))
    srv = Replica(
        name="snapkill",
        database_url=target_db,
        workdir=tmp_path,
        config_path=write_config(tmp_path / "treadle.yaml", {"agents": {"looper": LOOPER}}),
        env={"TREADLE_SWEEP_INTERVAL_SECONDS": "0.3"},
    )
    srv.start()
    try:
        await srv.wait_ready()
        async with httpx.AsyncClient(base_url=srv.url, timeout=60) as c:
            restoring = asyncio.create_task(c.post("/v1/_snapshots/any/restore", json={"json": doc}))

            async def inside() -> bool:
                return int((await query(target_db, SLEEPING))[0]["n"]) >= 1

            await until(inside, timeout=30, interval=0.02, what="the restore inside its transcript insert")
            srv.kill9()
            with contextlib.suppress(httpx.HTTPError):
                await restoring
            await execute(target_db, "DROP TRIGGER sk_slow_events ON events")  # waits out the dead backend
            assert await query(target_db, "SELECT count(*) AS n FROM runs") == [{"n": 0}]  # all or nothing
            assert await query(target_db, "SELECT count(*) AS n FROM memory") == [{"n": 0}]

            await srv.restart()
            r = await c.post(f"{srv.url}/v1/_snapshots/any/restore", json={"json": doc})
            assert r.status_code == 200, r.text
            assert r.json()["restored"]["runs"] == 3 and r.json()["paused_runs_resumed"] == 3

            async def finished() -> bool:
                rows = await query(target_db, "SELECT status FROM runs WHERE id = ANY(%s)", (runs,))
                return {row["status"] for row in rows} == {"completed"}

            await until(finished, timeout=30, interval=0.1, what="the restored runs to finish")
            for run_id in runs:
                events = (await c.get(f"{srv.url}/v1/runs/{run_id}/events")).json()["events"]
                assert check_paired(events) == [] and [e["type"] for e in events].count("done") == 1
            [row] = await query(target_db, "SELECT value FROM memory WHERE key = 'calls'")
            assert row["value"] == 3 * 2  # each incr once: the mid-way run's first came with the snapshot
    finally:
        srv.stop()
