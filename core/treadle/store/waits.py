"""Wait keys and pokes: how parked runs are woken.

Protocol (no lost wake-ups):
1. a tool reads `version(key)` *before* it checks its condition (e.g. "is there a message?");
2. finding nothing, it returns `Park(key, since_version=v)`;
3. the park commit locks the key rows (FOR SHARE) and parks only if every version is unchanged;
   otherwise the run goes straight back to `running` and its next step is enqueued;
4. a poke bumps the version (waiting for any park commit holding the row) and only then, in a
   second statement with a fresh snapshot, wakes the runs waiting on the key.

Durable pokes (no wake lost to a crash between a commit and its poke): a transaction that stores
a fact some run may wait for (an application tool's answer, a resolved question, a steering
input, a channel message) also records a poke of the fact's key due at once (`poke_soon`, or
`POKE_SOON_SQL` inside the storing statement). The caller pokes right after its commit, and that
poke deletes the due record; if the process dies or stalls in between, the maintenance pass
(`poke_due`) finds the record and does the poke within the sweeper's period.

Timed pokes: `poke_at` records a poke of a key due at a moment (a channel message published with
`deliver_at` becomes visible then); `poke_due`, run by the maintenance pass, does the due ones —
bump and wake as above, in the transaction that deletes the timer, so none is lost or done twice.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from treadle.store.db import Pool
from treadle.store.runs import JOBS_CHANNEL

# A poke due now, as a CTE of a storing statement; `{select}` yields (tenant_id, key, now()) rows.
POKE_SOON_SQL = "INSERT INTO wait_timers (tenant_id, key, due_at) {select} ON CONFLICT DO NOTHING"


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
            # this poke does every due one of these keys recorded by a storing commit (`poke_soon`)
            # but one a maintenance pass holds (`poke_due` does that one). Timers before keys, as
            # `poke_due` takes them: the other order deadlocked a publish against the maintenance
            # pass (the contract suite's cloud shape, issue 43 item 1)
            await conn.execute(
                """DELETE FROM wait_timers t USING (
                       SELECT tenant_id, key, due_at FROM wait_timers
                       WHERE tenant_id = %s AND key = ANY(%s::text[]) AND due_at <= now()
                       FOR UPDATE SKIP LOCKED) d
                   WHERE t.tenant_id = d.tenant_id AND t.key = d.key AND t.due_at = d.due_at""",
                (tenant_id, sorted(set(keys))),
            )
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

    @staticmethod
    async def poke_at(conn: Any, tenant_id: str, key: str, due_at: datetime) -> None:
        """Record a poke of `key` due at `due_at`, in the caller's transaction (`poke_due` does it)."""
        await conn.execute(
            "INSERT INTO wait_timers (tenant_id, key, due_at) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
            (tenant_id, key, due_at),
        )

    @staticmethod
    async def poke_soon(conn: Any, tenant_id: str, keys: list[str]) -> None:
        """Record a poke of `keys` due now, in the caller's (storing) transaction: the poke the
        caller makes after its commit deletes it; if that poke is lost, `poke_due` does it."""
        await conn.execute(
            POKE_SOON_SQL.format(select="SELECT %s, k, now() FROM unnest(%s::text[]) AS k"),
            (tenant_id, sorted(set(keys))),
        )

    async def poke_due(self, limit: int = 1000) -> list[tuple[str, int]]:
        """Do the timed pokes that are due: bump their keys and wake the runs waiting on them."""
        async with self.pool.connection() as conn, conn.transaction():
            cur = await conn.execute(
                """WITH due AS (
                       SELECT tenant_id, key, due_at FROM wait_timers WHERE due_at <= now()
                       ORDER BY due_at LIMIT %s FOR UPDATE SKIP LOCKED),
                   gone AS (
                       DELETE FROM wait_timers t USING due
                       WHERE t.tenant_id = due.tenant_id AND t.key = due.key AND t.due_at = due.due_at
                       RETURNING t.tenant_id, t.key)
                   SELECT DISTINCT tenant_id, key FROM gone ORDER BY tenant_id, key""",
                (limit,),
            )
            rows = await cur.fetchall()
            if not rows:
                return []
            tenants, keys = [r["tenant_id"] for r in rows], [r["key"] for r in rows]
            await conn.execute(
                """INSERT INTO wait_keys (tenant_id, key, version)
                   SELECT t, k, 1 FROM unnest(%s::text[], %s::text[]) AS u(t, k)
                   ON CONFLICT (tenant_id, key) DO UPDATE SET version = wait_keys.version + 1""",
                (tenants, keys),
            )
            return await self._wake(
                conn,
                """SELECT DISTINCT w.run_id FROM run_waits w
                   JOIN unnest(%(tenants)s::text[], %(keys)s::text[]) AS u(t, k)
                     ON w.tenant_id = u.t AND w.key = u.k""",
                {"tenants": tenants, "keys": keys},
            )

    async def wake_key_everywhere(self, key: str) -> list[tuple[str, int]]:
        """Poke `key` in every tenant that has it (the runtime's resume: store/pause.py)."""
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute("UPDATE wait_keys SET version = version + 1 WHERE key = %s", (key,))
            return await self._wake(
                conn, "SELECT DISTINCT run_id FROM run_waits WHERE key = %(key)s", {"key": key})

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
            RETURNING id, tenant_id, step_no, created_at
        ), gone AS (
            DELETE FROM run_waits WHERE run_id IN (SELECT id FROM r)
        ), jb AS (
            INSERT INTO jobs (tenant_id, run_id, step_no, run_created)
            SELECT tenant_id, id, step_no, created_at FROM r WHERE %(jobs)s
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
