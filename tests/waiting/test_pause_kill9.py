"""The runtime's pause survives kill -9 (issue 36 item 2): a real `treadle serve` is SIGKILLed while
paused, inside a step's commit while pausing, and half way through a resume; after the restart the
runtime state and the parked runs are what they were, and every run finishes with each Memory
`incr` (a transactional effect) applied once and every tool_use answered once.

The kill windows are made certain, not hoped for: a trigger that sleeps (tests/support/e2e.py
`slow_trigger`) holds the statement the kill must land in, and the test waits until Postgres
reports the backend inside that sleep."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.chaos import Replica, write_config
from tests.support.e2e import check_paired, execute, query, slow_trigger
from treadle.testing import ACCEPT_JSON, until

pytestmark = pytest.mark.e2e

CALLS = 3
#: each model call's time: a run takes CALLS + 1 of them (4 s), so a pause declared right after the
#: runs start finds every one of them before its end
LATENCY_MS = 1000
CONFIG = {
    "agents": {
        "looper": {"model": "tool-caller", "tools": ["Memory"], "mock": {"tool_calls": CALLS, "latency_ms": LATENCY_MS}}
    }
}
RUNS = 6
#: a short lease, so that the steps a kill left leased are taken over within seconds
ENV = {"TREADLE_SWEEP_INTERVAL_SECONDS": "0.3", "TREADLE_LEASE_SECONDS": "2", "TREADLE_REQUEUE_AFTER_SECONDS": "3"}
SLEEPING = "SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND datname = current_database()"


@pytest.fixture
def db(migrated_db_url: str) -> str:
    """The served replicas' database (migrated, this test's own)."""
    return migrated_db_url


@contextlib.asynccontextmanager
async def served(db: str, tmp_path: Path) -> AsyncIterator[tuple[Replica, httpx.AsyncClient]]:
    srv = Replica(
        name="pause",
        database_url=db,
        config_path=write_config(tmp_path / "treadle.yaml", CONFIG),
        workdir=tmp_path,
        env=ENV,
    )
    srv.start()
    try:
        await srv.wait_ready()
        async with httpx.AsyncClient(headers=ACCEPT_JSON, timeout=60) as c:
            yield srv, c
    finally:
        srv.stop()


async def _start_runs(c: httpx.AsyncClient, base: str) -> list[str]:
    ids = []
    for i in range(RUNS):
        r = await c.post(f"{base}/v1/runs", json={"agent": "looper", "prompt": f"run {i}"})
        assert r.status_code == 202, r.text
        ids.append(r.json()["run_id"])
    return ids


async def _state(c: httpx.AsyncClient, base: str) -> dict[str, Any]:
    r = await c.get(f"{base}/v1/_state")
    assert r.status_code == 200, r.text
    return dict(r.json())


async def _statuses(db: str, run_ids: list[str]) -> dict[str, str]:
    rows = await query(db, "SELECT id, status FROM runs WHERE id = ANY(%s)", (run_ids,))
    return {r["id"]: r["status"] for r in rows}


async def _all_ended_once(db: str, c: httpx.AsyncClient, base: str, run_ids: list[str]) -> None:
    """Every run completed; its transcript pairs every tool_use with one result; the Memory
    counter all the runs `incr` holds exactly RUNS x CALLS (no effect lost or doubled)."""

    async def ended() -> bool:
        return set((await _statuses(db, run_ids)).values()) == {"completed"}

    await until(ended, timeout=60, interval=0.1, what="every run to complete")
    for run_id in run_ids:
        events = (await c.get(f"{base}/v1/runs/{run_id}/events")).json()["events"]
        assert check_paired(events) == [], run_id
        assert sum(e["type"] == "tool_result" for e in events) == CALLS
        assert [e["type"] for e in events].count("done") == 1
    [row] = await query(db, "SELECT value FROM memory WHERE key = 'calls'")
    assert row["value"] == RUNS * CALLS


async def test_killed_while_paused_the_restart_is_paused_with_the_same_parked_runs(db: str, tmp_path: Path) -> None:
    async with served(db, tmp_path) as (srv, c):
        runs = await _start_runs(c, srv.url)
        r = await c.post(f"{srv.url}/v1/_pause", json={"timeout_ms": 30_000})
        assert r.status_code == 200, r.text
        out = r.json()
        assert out["state"] == "paused" and "warnings" not in out, out
        before = await _statuses(db, runs)
        assert out["paused_runs_count"] == RUNS and set(before.values()) == {"waiting"}
        parked = runs
        srv.kill9()

        await srv.restart()
        assert await _state(c, srv.url) == {"state": "paused", "paused_runs_count": len(parked), "active_runs_count": 0}
        assert await _statuses(db, runs) == before
        r = await c.post(f"{srv.url}/v1/runs", json={"agent": "looper", "prompt": "new"})
        assert r.status_code == 503 and r.json()["code"] == "runtime_paused"
        r = await c.post(f"{srv.url}/v1/_resume")
        assert r.status_code == 200 and r.json() == {"state": "running", "resumed_runs_count": len(parked)}, r.text
        await _all_ended_once(db, c, srv.url, runs)


async def test_killed_inside_a_step_commit_while_pausing_every_run_parks_after_the_restart(
    db: str, tmp_path: Path
) -> None:
    await execute(db, slow_trigger("pk_slow_result", 4, "INSERT ON events", when="NEW.type = 'tool_result'"))
    async with served(db, tmp_path) as (srv, c):
        runs = await _start_runs(c, srv.url)

        async def in_commit() -> bool:  # a step inside its commit; the others queue behind its Memory row
            return await _sleeping(db) >= 1

        await until(in_commit, timeout=30, interval=0.05, what="a step commit inside the slow trigger")
        pausing = asyncio.create_task(c.post(f"{srv.url}/v1/_pause", json={"timeout_ms": 120_000}))

        async def declared() -> bool:
            return bool((await query(db, "SELECT state FROM runtime_state"))[0]["state"] == "pausing")

        await until(declared, timeout=10, interval=0.02, what="the pause declared")
        srv.kill9()  # the steps' leases stay until they expire (a commit statement may still land)
        with contextlib.suppress(httpx.HTTPError):
            await pausing
        await execute(db, "DROP TRIGGER pk_slow_result ON events")

        await srv.restart()  # the sweeper takes the expired leases over; each step parks at its top

        async def settled() -> dict[str, Any] | None:
            st = await _state(c, srv.url)
            return st if st["state"] == "paused" else None

        st = await until(settled, timeout=30, interval=0.1, what="the pause to settle after the takeover")
        assert st == {"state": "paused", "paused_runs_count": RUNS, "active_runs_count": 0}
        assert set((await _statuses(db, runs)).values()) == {"waiting"}
        r = await c.post(f"{srv.url}/v1/_resume")
        assert r.status_code == 200 and r.json()["resumed_runs_count"] == RUNS, r.text
        await _all_ended_once(db, c, srv.url, runs)


async def test_killed_half_way_through_a_resume_the_restart_finishes_it(db: str, tmp_path: Path) -> None:
    async with served(db, tmp_path) as (srv, c):
        runs = await _start_runs(c, srv.url)
        r = await c.post(f"{srv.url}/v1/_pause", json={"timeout_ms": 30_000})
        assert r.status_code == 200 and r.json()["state"] == "paused", r.text
        parked = r.json()["paused_runs_count"]
        assert parked == RUNS
        # the resume's second transaction (wake every parked run) is held; its first (running) commits
        await execute(db, slow_trigger("pk_slow_wake", 4, "UPDATE ON wait_keys", when="NEW.key = 'runtime:resume'"))
        resuming = asyncio.create_task(c.post(f"{srv.url}/v1/_resume"))

        async def half_way() -> bool:
            running = (await query(db, "SELECT state FROM runtime_state"))[0]["state"] == "running"
            return running and await _sleeping(db) >= 1

        await until(half_way, timeout=10, interval=0.02, what="the resume inside its wake")
        srv.kill9()
        with contextlib.suppress(httpx.HTTPError):
            await resuming
        assert len([s for s in (await _statuses(db, runs)).values() if s == "waiting"]) == parked
        await execute(db, "DROP TRIGGER pk_slow_wake ON wait_keys")

        await srv.restart()  # its sweeper finds runs parked by a pause in a running runtime, and wakes them
        await _all_ended_once(db, c, srv.url, runs)
        assert await _state(c, srv.url) == {"state": "running", "paused_runs_count": 0, "active_runs_count": 0}


async def _sleeping(db: str) -> int:
    return int((await query(db, SLEEPING))[0]["n"])
