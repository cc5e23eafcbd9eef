"""A real `treadle serve` is SIGKILLed between an application tool answer's commit and its wake:
the run still wakes, within the restarted server's sweeper period (store/waits.py, durable pokes).

The window is made certain, not hoped for: a trigger makes the poke's version bump of the call's
wait key slow (a BEFORE UPDATE that sleeps), so when the answer's row is visible the request is
inside its poke — the kill rolls the poke back and leaves the run parked with its answer stored."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.chaos import Replica, write_config
from tests.support.db import clone_database, drop_database
from tests.support.e2e import execute, query, slow_trigger
from treadle.testing import ACCEPT_JSON, until

pytestmark = pytest.mark.e2e

LOOKUP = {"name": "lookup_order", "description": "Look an order up",
          "input_schema": {"type": "object", "properties": {"order_id": {"type": "string"}}}}
CONFIG = {"agents": {"shopper": {"model": "script", "tools": [], "mock": {"script": [
    {"tool": "lookup_order", "input": {"order_id": "A-17"}}, {"text": "all done"}]}}}}
SLOW_POKE = slow_trigger("lw_slow_poke", 3, "UPDATE ON wait_keys",
                         when="NEW.key LIKE 'client_tool:%' AND NEW.version > OLD.version")


@pytest.fixture
def db(server_url: str, migrated_template: str) -> Iterator[str]:
    url = clone_database(server_url, migrated_template, "lostwake")
    yield url
    drop_database(server_url, url)


async def status(db: str, run_id: str) -> str:
    return str((await query(db, "SELECT status FROM runs WHERE id = %s", (run_id,)))[0]["status"])


async def test_a_kill_between_the_answer_and_its_wake_loses_no_wake(db: str, tmp_path: Path) -> None:
    await execute(db, SLOW_POKE)
    srv = Replica(name="lw", database_url=db, config_path=write_config(tmp_path / "treadle.yaml", CONFIG),
                  workdir=tmp_path, env={"TREADLE_SWEEP_INTERVAL_SECONDS": "0.5"})
    srv.start()
    try:
        await srv.wait_ready()
        async with httpx.AsyncClient(headers=ACCEPT_JSON, base_url=srv.url, timeout=30) as c:
            r = await c.post("/v1/runs", json={"agent": "shopper", "prompt": "where is A-17?",
                                               "client_tools": [LOOKUP]})
            assert r.status_code == 202, r.text
            run_id = r.json()["run_id"]

            async def parked() -> bool:
                return await status(db, run_id) == "waiting"

            await until(parked, timeout=30, interval=0.05, what="the run to park")
            [row] = await query(db, "SELECT tool_use_id FROM run_waits WHERE run_id = %s", (run_id,))
            answer = asyncio.create_task(c.post(f"/v1/runs/{run_id}/tool_results",
                                                json={"tool_use_id": row["tool_use_id"], "content": "shipped"}))

            async def stored() -> bool:
                return bool(await query(db, "SELECT 1 FROM client_tool_results WHERE run_id = %s", (run_id,)))

            await until(stored, timeout=10, interval=0.01, what="the answer's commit")
            srv.kill9()  # inside the poke: the answer is committed, its wake is not
            with contextlib.suppress(httpx.HTTPError):
                await answer
        assert await status(db, run_id) == "waiting"
        await execute(db, "DROP TRIGGER lw_slow_poke ON wait_keys")
        srv.start()
        await srv.wait_ready()

        async def completed() -> bool:
            return await status(db, run_id) == "completed"

        await until(completed, timeout=15, interval=0.05, what="the sweeper to wake the run")
    finally:
        srv.stop()
    results = await query(db, "SELECT payload FROM events WHERE run_id = %s AND type = 'tool_result'", (run_id,))
    assert [r["payload"]["text"] for r in results] == ["shipped"]
