"""A poke and the maintenance pass's `poke_due` take the same key's rows in one order (timers,
then keys): a channel publish racing the maintenance function deadlocked (Postgres aborted the
publish: a 500) when the poke bumped the key before deleting its due timer (found by the
contract suite's cloud shape, issue 43 item 1)."""

from __future__ import annotations

import asyncio

import psycopg

from treadle.store.db import open_pool
from treadle.store.waits import WaitStore

TENANT = "t_lock_order"
KEY = "channel:news:"


async def lock_waiters(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                           " AND datname = current_database()").fetchone()
    return int(row[0]) if row else 0


async def test_a_poke_never_waits_on_a_timer_the_maintenance_pass_holds(migrated_db_url: str) -> None:
    with psycopg.connect(migrated_db_url, autocommit=True) as conn:
        conn.execute("INSERT INTO wait_timers (tenant_id, key, due_at) VALUES (%s, %s, now() - interval '1 s')",
                     (TENANT, KEY))
    pool = await open_pool(migrated_db_url, 2)
    try:
        store = WaitStore(pool, jobs_in_db=True, requeue_after_s=30)
        # the maintenance pass, in the order poke_due takes its locks: the due timer first …
        with psycopg.connect(migrated_db_url) as maintenance:
            maintenance.execute("DELETE FROM wait_timers WHERE tenant_id = %s AND key = %s", (TENANT, KEY))
            poke = asyncio.create_task(store.poke(TENANT, [KEY]))  # … while a publish pokes the key
            for _ in range(200):  # the poke is done, or waits on a lock the maintenance pass holds
                if poke.done() or await lock_waiters(migrated_db_url):
                    break
                await asyncio.sleep(0.02)
            # … then the key (a poke that took the key first now waits on the timer: a deadlock)
            maintenance.execute(
                "INSERT INTO wait_keys (tenant_id, key, version) VALUES (%s, %s, 1)"
                " ON CONFLICT (tenant_id, key) DO UPDATE SET version = wait_keys.version + 1", (TENANT, KEY))
            maintenance.commit()
        assert await asyncio.wait_for(poke, 10) == []  # no DeadlockDetected, nothing parked on it
        with psycopg.connect(migrated_db_url, autocommit=True) as conn:
            row = conn.execute("SELECT version FROM wait_keys WHERE tenant_id = %s AND key = %s",
                               (TENANT, KEY)).fetchone()
        assert row is not None and row[0] == 2  # bumped by both
    finally:
        await pool.close()
