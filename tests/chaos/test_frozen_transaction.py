"""A replica frozen inside a transaction that is not a step transaction stops the sweeping of
every other replica. Found by test_exactly_once_chaos.py under SIGSTOP.

StepStore.transaction bounds a frozen *step* transaction: it sets
idle_in_transaction_session_timeout to the lease, so Postgres ends the session. The other
transactions of the engine have no bound. A process SIGSTOPped between one of their statements
and the COMMIT keeps its locks until it is continued. Two such places stall the fleet:

- WaitStore.poke outside a step, for example Steering.wake_parent after a child's final commit.
  It holds the wait_keys row. Every live sweeper then hangs in Sweeper.sweep_once →
  RunWaker.wake_due → SubRunStore.settled_parent_waits → poke of the same key, and sweeps
  nothing again. Chaos seed 692741 stalled a takeover for 18 s this way: the frozen session sat
  idle in a transaction in `INSERT INTO wait_keys ...`.
- StepStore.sweep_expired, between its statement and the COMMIT. It holds the singleton sweep
  lock (advisory 7472616401), so every other sweeper's try-lock fails and nothing is swept. It
  also holds the row locks of the runs it swept, so workers claiming them wait. Chaos seed
  533683 stalled a takeover for 17.7 s this way (a frozen sweep transaction blocked 3 sessions).

Each test freezes a real replica A at that point. A trigger makes the one statement slow, for A
only (PGAPPNAME), and A gets SIGSTOP while the statement runs. Then a second replica B starts,
and an expired lease must be swept. The core bounds every pooled session's time inside a
transaction by the lease (`idle_in_transaction_session_timeout`, store/db.py `open_pool`), so
Postgres ends A's session and releases what it held.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support.chaos import Db, Replica, write_config
from tests.support.e2e import execute
from treadle.client import TreadleClient
from treadle.testing import UntilTimeout, until

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
SLOW_S = 1.5  # how long the statement A is frozen in runs (A gets SIGSTOP meanwhile)

# A's poke of a wait key (an UPDATE that bumps the version) sleeps first: A freezes inside it
SLOW_POKE = f"""
CREATE FUNCTION frozen_slow_poke() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('application_name') = 'replica-a' AND NEW.version > OLD.version THEN
        PERFORM pg_sleep({SLOW_S});
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER frozen_slow_poke BEFORE UPDATE ON wait_keys FOR EACH ROW EXECUTE FUNCTION frozen_slow_poke();
"""
# A's sweep of the bait run (the statement inserts its job) sleeps: A freezes inside the sweep
SLOW_SWEEP = f"""
CREATE FUNCTION frozen_slow_sweep() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('application_name') = 'replica-a' AND NEW.run_id = 'r_bait' THEN
        PERFORM pg_sleep({SLOW_S});
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER frozen_slow_sweep AFTER INSERT ON jobs FOR EACH ROW EXECUTE FUNCTION frozen_slow_sweep();
"""


@pytest.fixture
def fresh_url(migrated_db_url: str) -> str:
    return migrated_db_url


def replica(name: str, url: str, tmp_path: Path) -> Replica:
    workdir = tmp_path / name
    workdir.mkdir()
    config = write_config(workdir / "treadle.yaml", CONFIG)
    return Replica(name=name, database_url=url, config_path=config, workdir=workdir,
                   env={**ENV, "PGAPPNAME": f"replica-{name}"})


@asynccontextmanager
async def frozen_pair(url: str, tmp_path: Path, slow_sql: str) -> AsyncIterator[tuple[Replica, Replica, Db]]:
    """Replicas A (started) and B (not yet) on `url`, with `slow_sql` installed where A will be
    frozen; both stopped, and the test's connection closed, when the block ends."""
    await execute(url, slow_sql)
    a, b = replica("a", url, tmp_path), replica("b", url, tmp_path)
    db = Db(url)
    try:
        await a.restart()
        yield a, b, db
    finally:
        await db.close()
        a.stop()
        b.stop()


async def poll(predicate: Any, timeout: float, interval: float = 0.05) -> bool:
    """Whether `predicate()` became true before `timeout` (no exception either way)."""
    try:
        await until(predicate, timeout, interval=interval)
    except UntilTimeout:
        return False
    return True


async def expired_run(db: Db, run_id: str) -> None:
    """A dead worker's run: its lease has expired and it has no job; only a sweep revives it."""
    await db.query("INSERT INTO runs (id, tenant_id, agent, status, lease_owner, lease_until)"
                   " VALUES (%s, 'default', 'helper', 'running', %s, now() - interval '1 second')",
                   (run_id, GHOST_OWNER))


async def freeze_a_inside(a: Replica, db: Db, statement: str) -> int:
    """SIGSTOP replica A while one of its sessions runs a statement containing `statement` (slowed
    by the trigger); return that backend once the statement has ended and the session sits in its
    open transaction."""

    async def running() -> int | None:
        rows = await db.query("SELECT pid FROM pg_stat_activity WHERE application_name = 'replica-a'"
                              " AND state = 'active' AND wait_event = 'PgSleep' AND strpos(query, %s) > 0",
                              (statement,))
        return rows[0]["pid"] if rows else None

    backend = await until(running, timeout=20, interval=0.02, what=f"replica A to run {statement!r}")
    a.sigstop()

    async def idle_in_transaction() -> bool:
        rows = await db.query("SELECT state FROM pg_stat_activity WHERE pid = %s", (backend,))
        return bool(rows) and rows[0]["state"] == "idle in transaction"

    await until(idle_in_transaction, timeout=10, interval=0.1, what="the frozen statement to end")
    return int(backend)


async def sweeps_while_frozen(a: Replica, b: Replica, db: Db, backend: int) -> tuple[bool, list[dict[str, Any]]]:
    """Start replica B, give it an expired lease to sweep while A stays frozen, then continue A.
    Returns (swept while A was frozen, the sessions that waited on A's backend)."""
    await b.restart()
    await expired_run(db, "r_ghost")

    async def ghost_swept() -> bool:
        rows = await db.query("SELECT lease_owner FROM runs WHERE id = 'r_ghost'")
        return bool(rows[0]["lease_owner"] != GHOST_OWNER)

    swept = await poll(ghost_swept, timeout=LEASE_S + 3)  # 20 sweep intervals of B
    blocked = await db.query(
        "SELECT application_name AS app, wait_event_type, wait_event, left(query, 70) AS query"
        " FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))", (backend,))
    a.sigcont()  # the frozen process resumes: everything must move again (else the setup is wrong)
    if not await poll(ghost_swept, timeout=15):
        raise RuntimeError("setup: the expired lease was not swept even after replica A resumed")
    return swept, blocked


async def test_a_replica_frozen_in_a_poke_does_not_stop_the_sweepers(fresh_url: str, tmp_path: Path) -> None:
    async with frozen_pair(fresh_url, tmp_path, SLOW_POKE) as (a, b, db):
        async with TreadleClient(a.url, timeout=10) as client:
            await client.start_run("parent", "spawn one")
        # the child ends on A, whose wake-up of the parent (or its sweeper's repair) pokes the key
        backend = await freeze_a_inside(a, db, "INSERT INTO wait_keys")
        swept, blocked = await sweeps_while_frozen(a, b, db, backend)

        async def all_done() -> bool:
            return await db.scalar("SELECT count(*) FROM runs WHERE agent IN ('parent', 'helper')"
                                   " AND status <> 'completed'") == 0

        await until(all_done, timeout=20, interval=0.1, what="the parent and its child to complete")
    assert swept, (f"replica B swept no expired lease for {LEASE_S + 3} s while replica A was frozen in a poke;"
                   f" waiting on A's session: {blocked}")


async def test_a_replica_frozen_in_a_sweep_does_not_stop_the_sweepers(fresh_url: str, tmp_path: Path) -> None:
    async with frozen_pair(fresh_url, tmp_path, SLOW_SWEEP) as (a, b, db):
        await expired_run(db, "r_bait")  # A's sweeper takes it, and freezes in that sweep
        backend = await freeze_a_inside(a, db, "pg_try_advisory_xact_lock(7472616401)")
        swept, blocked = await sweeps_while_frozen(a, b, db, backend)
    assert swept, (f"replica B swept no expired lease for {LEASE_S + 3} s while replica A was frozen in a sweep;"
                   f" waiting on A's session: {blocked}")
