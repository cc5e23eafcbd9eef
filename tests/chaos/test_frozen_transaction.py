"""A replica frozen inside a transaction that is not a step transaction stops the sweeper.

StepStore.transaction bounds a frozen *step* transaction: it sets
idle_in_transaction_session_timeout to the lease, so Postgres ends the session. Other
transactions have no such bound. One of them is WaitStore.poke, run outside a step, for example
by Steering.wake_parent after a child's final commit. A process SIGSTOPped between its first
statement (the upsert of the wait_keys row) and its COMMIT holds that row lock until it is
continued.

Every live replica's sweeper then hangs: Sweeper.sweep_once → RunWaker.wake_due →
SubRunStore.settled_parent_waits finds the parent, whose child has ended and whose wake-up is
stuck, and its poke of the same key waits on the row. sweep_once never returns, so no expired
lease is swept again. That includes the leases of the frozen replica itself, which is what the
sweeper is there for.

test_exactly_once_chaos.py hit this under SIGSTOP. One seed stalled a takeover for 18 s, and the
frozen replica's session sat idle in a transaction in `INSERT INTO wait_keys ...`. This test
reproduces it deterministically: an open transaction holds the row, as the frozen replica
would. Strict xfail: once the core bounds such transactions (or keeps the sweeper from waiting
on them), the test passes, and the marker must go.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from chaos_support import Db, Replica, create_database, drop_database, wait_until, write_config

from treadle.client import TreadleClient
from treadle.store.migrate import migrate

pytestmark = pytest.mark.e2e

LEASE_S = 2.0
CONFIG: dict[str, Any] = {
    "agents": {
        "parent": {
            "model": "script",
            "tools": ["Agent"],
            "mock": {"script": [{"tool": "Agent", "input": {"op": "spawn", "name": "helper", "prompt": "go"}},
                                {"text": "done"}]},
        },
        "helper": {"model": "echo", "mock": {"latency_ms": 300}},
    }
}
ENV = {
    "TREADLE_LEASE_SECONDS": str(LEASE_S),
    "TREADLE_SWEEP_INTERVAL_SECONDS": "0.25",
    "TREADLE_REQUEUE_AFTER_SECONDS": "2",
    "TREADLE_WORKERS": "2",
}
GHOST_OWNER = "ghost:1:000000:1"
# the first statement of WaitStore.poke, for one key
POKE_UPSERT = (
    "INSERT INTO wait_keys (tenant_id, key, version) VALUES ('default', %s, 1)"
    " ON CONFLICT (tenant_id, key) DO UPDATE SET version = wait_keys.version + 1"
)


@pytest.fixture
def fresh_url(server_url: str) -> Iterator[str]:
    url = create_database(server_url, "frozen")
    yield url
    drop_database(server_url, url)


async def poll(predicate: Any, timeout: float, interval: float = 0.05) -> bool:
    """Whether `predicate()` became true before `timeout` (no exception either way)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await predicate():
            return True
        await asyncio.sleep(interval)
    return bool(await predicate())


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="core: a frozen WaitStore.poke outside a step transaction holds its wait_keys row with no idle "
    "timeout; the sweeper's settled_parent_waits poke then waits on it and no expired lease is swept",
)
async def test_a_frozen_poke_does_not_stop_the_sweeper(fresh_url: str, tmp_path: Path) -> None:
    url = fresh_url
    await migrate(url)
    replica = Replica(name="solo", database_url=url, config_path=write_config(tmp_path / "treadle.yaml", CONFIG),
                      workdir=tmp_path, env=ENV)
    holder: psycopg.AsyncConnection[Any] | None = None
    db = Db(url)
    try:
        replica.start()
        await replica.wait_ready()
        async with TreadleClient(replica.url, timeout=10) as client:
            parent = (await client.start_run("parent", "spawn one"))["run_id"]

        async def parked_key() -> str | None:
            rows = await db.query("SELECT key FROM run_waits WHERE run_id = %s", (parent,))
            return rows[0]["key"] if rows else None

        key = await wait_until(parked_key, timeout=20, what="the parent to park on its child")

        # a frozen replica, between the first statement of its poke of that key and the commit
        holder = await psycopg.AsyncConnection.connect(url)
        await holder.execute(POKE_UPSERT, (key,))
        holder_pid = holder.info.backend_pid

        async def child_done() -> bool:
            rows = await db.query("SELECT status FROM runs WHERE parent_run_id = %s", (parent,))
            return bool(rows) and rows[0]["status"] == "completed"

        await wait_until(child_done, timeout=20, what="the child to complete")

        async def sweeper_waits() -> bool:  # the child's own wake-up, and the sweeper's repair poke
            n = await db.scalar("SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                                (holder_pid,))
            return n >= 2

        await poll(sweeper_waits, timeout=10)  # a fixed core never waits: go on and find it sweeping

        # a dead worker's run: its lease has expired and it has no job, so only a sweep revives it
        await db.query("INSERT INTO runs (id, tenant_id, agent, status, lease_owner, lease_until)"
                       " VALUES ('r_ghost', 'default', 'helper', 'running', %s, now() - interval '1 second')",
                       (GHOST_OWNER,))

        async def ghost_swept() -> bool:
            rows = await db.query("SELECT lease_owner FROM runs WHERE id = 'r_ghost'")
            return rows[0]["lease_owner"] != GHOST_OWNER

        swept_while_held = await poll(ghost_swept, timeout=LEASE_S + 3)  # 20 sweep intervals
        blocked = await db.query(
            "SELECT pid, wait_event_type, wait_event, left(query, 80) AS query FROM pg_stat_activity"
            " WHERE %s = ANY(pg_blocking_pids(pid))", (holder_pid,))

        # the frozen process resumes (or dies): everything moves again (else the setup is wrong)
        await holder.rollback()
        await holder.close()
        holder = None
        if not await poll(ghost_swept, timeout=10):
            raise RuntimeError("setup: the expired lease was not swept even after the holder ended")

        async def parent_done() -> bool:
            return await db.scalar("SELECT count(*) FROM runs WHERE id = %s AND status = 'completed'", (parent,)) == 1

        await wait_until(parent_done, timeout=20, what="the parent to complete")
    finally:
        if holder is not None:
            await holder.close()
        await db.close()
        replica.stop()

    assert swept_while_held, (
        f"no expired lease was swept for {LEASE_S + 3} s while one transaction held the wait_keys row {key!r};"
        f" waiting on it: {blocked}"
    )
