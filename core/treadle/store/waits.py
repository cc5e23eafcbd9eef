"""Wait keys and pokes: how parked runs are woken.

Protocol (no lost wake-ups):
1. a tool reads `version(key)` *before* it checks its condition (e.g. "is there a message?");
2. finding nothing, it returns `Park(key, since_version=v)`;
3. the park commit locks the key rows (FOR SHARE) and parks only if every version is unchanged;
   otherwise the run goes straight back to `running` and its next step is enqueued;
4. a poke bumps the version (waiting for any park commit holding the row) and only then, in a
   second statement with a fresh snapshot, wakes the runs waiting on the key.
"""

from __future__ import annotations

from treadle.store.db import Pool
from treadle.store.runs import JOBS_CHANNEL


class WaitStore:
    def __init__(self, pool: Pool, *, jobs_in_db: bool, requeue_after_s: float) -> None:
        self.pool = pool
        self.jobs_in_db = jobs_in_db
        self.requeue_after_s = requeue_after_s

    async def version(self, tenant_id: str, key: str) -> int:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                """INSERT INTO wait_keys (tenant_id, key) VALUES (%s, %s)
                   ON CONFLICT (tenant_id, key) DO UPDATE SET version = wait_keys.version
                   RETURNING version""",
                (tenant_id, key),
            )
            row = await cur.fetchone()
        return int(row["version"]) if row else 0

    async def poke(self, tenant_id: str, keys: list[str]) -> list[tuple[str, int]]:
        """Bump the keys and wake every run waiting on any of them. Returns (run_id, step_no) of
        the runs woken (their next step is already enqueued with the Postgres queue)."""
        if not keys:
            return []
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute(
                """INSERT INTO wait_keys (tenant_id, key, version)
                   SELECT %s, k, 1 FROM unnest(%s::text[]) AS k
                   ON CONFLICT (tenant_id, key) DO UPDATE SET version = wait_keys.version + 1""",
                (tenant_id, sorted(set(keys))),
            )
            return await self._wake(
                conn,
                "SELECT DISTINCT run_id FROM run_waits WHERE tenant_id = %(tenant)s AND key = ANY(%(keys)s)",
                {"tenant": tenant_id, "keys": keys},
            )

    async def wake_due(self, limit: int = 1000) -> list[tuple[str, int]]:
        """Wake runs whose wait deadline has passed (the sweeper / maintenance function)."""
        async with self.pool.connection() as conn, conn.transaction():
            return await self._wake(
                conn,
                "SELECT DISTINCT run_id FROM run_waits WHERE deadline <= now() LIMIT %(limit)s",
                {"limit": limit},
            )

    async def _wake(self, conn: object, select_runs: str, params: dict[str, object]) -> list[tuple[str, int]]:
        sql = f"""
        WITH target AS ({select_runs}),
        r AS (
            UPDATE runs SET status = 'running', lease_owner = NULL,
                   lease_until = now() + make_interval(secs => %(requeue)s), updated_at = now()
            WHERE id IN (SELECT run_id FROM target) AND status = 'waiting'
            RETURNING id, tenant_id, step_no
        ), gone AS (
            DELETE FROM run_waits WHERE run_id IN (SELECT id FROM r)
        ), jb AS (
            INSERT INTO jobs (tenant_id, run_id, step_no) SELECT tenant_id, id, step_no FROM r WHERE %(jobs)s
        )
        SELECT id, step_no FROM r
        """
        cur = await conn.execute(  # type: ignore[attr-defined]
            sql, {**params, "requeue": self.requeue_after_s, "jobs": self.jobs_in_db}
        )
        rows = await cur.fetchall()
        if rows and self.jobs_in_db:
            await conn.execute(f"SELECT pg_notify('{JOBS_CHANNEL}', '')")  # type: ignore[attr-defined]
        return [(r["id"], r["step_no"]) for r in rows]
