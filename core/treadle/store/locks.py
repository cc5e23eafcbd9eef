"""Transaction-level advisory locks: singletons (the schedule sweeper) and serialized starts
(treadle.yaml trigger sync, job claims under a fairness cap). Held until the caller's transaction ends."""

from __future__ import annotations

from typing import Any

import psycopg

#: pg advisory lock key of the schedule sweeper ("tr-sched")
SWEEPER_LOCK_KEY = 0x7472_2D73_6368_6564
#: pg advisory lock key of a job claim under a fairness cap ("tr-claim")
CLAIM_LOCK_KEY = 0x7472_2D63_6C61_696D
#: pg advisory lock key of the treadle.yaml trigger sync ("tr-yaml")
STATIC_TRIGGERS_LOCK_KEY = 0x7472_2D79_616D_6C00


async def xact_lock(conn: psycopg.AsyncConnection[Any], key: int) -> None:
    """Wait for the lock."""
    await conn.execute("SELECT pg_advisory_xact_lock(%s)", (key,))


async def try_xact_lock(conn: psycopg.AsyncConnection[Any], key: int) -> bool:
    """Take the lock if it is free; False when another transaction holds it."""
    cur = await conn.execute("SELECT pg_try_advisory_xact_lock(%s) AS got", (key,))
    row = await cur.fetchone()
    if row is None:
        return False
    return bool(row["got"] if isinstance(row, dict) else row[0])
