"""A2A rows (migration 0088): this treadle's outbound calls of remote agents (`A2ACallStore`,
treadle/a2a/client.py) and the push configs peers set on its tasks (`A2APushStore`,
treadle/a2a/push.py)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from treadle.store.db import Pool
from treadle.store.waits import POKE_SOON_SQL


def a2a_call_key(run_id: str, tool_use_id: str) -> str:
    """The wait key a run parks on while its call of a remote agent is not settled."""
    return f"a2a:{run_id}:{tool_use_id}"


@dataclass(frozen=True, slots=True)
class A2ACall:
    tenant_id: str
    run_id: str
    tool_use_id: str
    token: str
    wait_key: str
    remote_task_id: str | None


class A2ACallStore:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def open(self, tenant_id: str, run_id: str, tool_use_id: str, peer: str) -> A2ACall:
        """The call's row, made on its first invocation (a re-run of the step finds the same one:
        the same push token reaches the peer again)."""
        async with self.pool.connection() as conn:
            await conn.execute(
                """INSERT INTO a2a_calls (tenant_id, run_id, tool_use_id, token, wait_key, peer)
                   VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (run_id, tool_use_id) DO NOTHING""",
                (tenant_id, run_id, tool_use_id, secrets.token_urlsafe(24), a2a_call_key(run_id, tool_use_id), peer),
            )
            cur = await conn.execute(
                "SELECT * FROM a2a_calls WHERE run_id = %s AND tool_use_id = %s AND tenant_id = %s",
                (run_id, tool_use_id, tenant_id),
            )
            row = await cur.fetchone()
        assert row is not None
        return _call(row)

    async def set_task(self, run_id: str, tool_use_id: str, remote_task_id: str) -> None:
        async with self.pool.connection() as conn:
            await conn.execute("UPDATE a2a_calls SET remote_task_id = %s WHERE run_id = %s AND tool_use_id = %s",
                               (remote_task_id, run_id, tool_use_id))

    async def pushed(self, token: str, task_id: str) -> A2ACall | None:
        """A push notification for the call this token names: counted, and a poke of its key
        recorded with it (durable: the maintenance pass does it if the caller's is lost). None:
        no such call, or the notification is about another task."""
        sql = """
        WITH hit AS (
            UPDATE a2a_calls SET pushes = pushes + 1
            WHERE token = %(token)s AND (remote_task_id IS NULL OR remote_task_id = %(task)s)
            RETURNING *
        ), poke AS ({poke})
        SELECT * FROM hit"""
        async with self.pool.connection() as conn:
            cur = await conn.execute(sql.format(poke=POKE_SOON_SQL.format(
                select="SELECT tenant_id, wait_key, now() FROM hit")), {"token": token, "task": task_id})
            row = await cur.fetchone()
        return _call(row) if row is not None else None


def _call(row: Any) -> A2ACall:
    return A2ACall(row["tenant_id"], row["run_id"], row["tool_use_id"], row["token"], row["wait_key"],
                   row["remote_task_id"])


@dataclass(frozen=True, slots=True)
class PushConfig:
    tenant_id: str
    task_id: str
    config_id: str
    url: str
    token: str
    auth_scheme: str
    auth_sealed: bytes | None
    delivered_state: int
    attempts: int


@dataclass(frozen=True, slots=True)
class DueLook:
    """A config whose task may have a state to deliver (its run's status moved since the last look,
    or a failed delivery's retry is due)."""

    config: PushConfig
    run_status: str


class A2APushStore:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def put(self, c: PushConfig) -> PushConfig:
        """Set (create or replace) a task's push config; a replaced one is delivered afresh."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                """INSERT INTO a2a_push_configs (tenant_id, task_id, config_id, url, token, auth_scheme, auth_sealed)
                   VALUES (%s, %s, %s, %s, %s, %s, %s)
                   ON CONFLICT (tenant_id, task_id, config_id) DO UPDATE SET url = excluded.url,
                     token = excluded.token, auth_scheme = excluded.auth_scheme, auth_sealed = excluded.auth_sealed,
                     seen_status = NULL, delivered_state = 0, attempts = 0, next_attempt_at = now()
                   RETURNING *""",
                (c.tenant_id, c.task_id, c.config_id, c.url, c.token, c.auth_scheme, c.auth_sealed),
            )
            row = await cur.fetchone()
        assert row is not None
        return _config(row)

    async def get(self, tenant_id: str, task_id: str, config_id: str) -> PushConfig | None:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT * FROM a2a_push_configs WHERE tenant_id = %s AND task_id = %s AND config_id = %s",
                (tenant_id, task_id, config_id))
            row = await cur.fetchone()
        return _config(row) if row is not None else None

    async def for_task(self, tenant_id: str, task_id: str) -> list[PushConfig]:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT * FROM a2a_push_configs WHERE tenant_id = %s AND task_id = %s ORDER BY created_at, config_id",
                (tenant_id, task_id))
            return [_config(r) for r in await cur.fetchall()]

    async def delete(self, tenant_id: str, task_id: str, config_id: str) -> bool:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "DELETE FROM a2a_push_configs WHERE tenant_id = %s AND task_id = %s AND config_id = %s",
                (tenant_id, task_id, config_id))
            return cur.rowcount > 0

    async def due(self, limit: int = 100) -> list[DueLook]:
        """The configs to look at now: their run's status moved off the one last seen, or a retry is
        due. Claimed for a minute (`next_attempt_at`), so two maintenance passes do not both send."""
        async with self.pool.connection() as conn, conn.transaction():
            cur = await conn.execute(
                """WITH due AS (
                       SELECT c.tenant_id, c.task_id, c.config_id, r.status FROM a2a_push_configs c
                       JOIN runs r ON r.id = c.task_id
                       WHERE c.next_attempt_at <= now()
                         AND (c.seen_status IS DISTINCT FROM r.status OR c.attempts > 0)
                       ORDER BY c.next_attempt_at LIMIT %s FOR UPDATE OF c SKIP LOCKED)
                   UPDATE a2a_push_configs c SET next_attempt_at = now() + interval '60 seconds'
                   FROM due WHERE c.tenant_id = due.tenant_id AND c.task_id = due.task_id
                     AND c.config_id = due.config_id
                   RETURNING c.*, due.status AS run_status""",
                (limit,),
            )
            return [DueLook(_config(r), r["run_status"]) for r in await cur.fetchall()]

    async def looked(self, c: PushConfig, status: str, state: int | None, *, failed: bool,
                     retry_at: datetime | None = None) -> None:
        """Record a look: `state` delivered (None: nothing new to deliver), or a failed delivery
        retried at `retry_at`."""
        async with self.pool.connection() as conn:
            if failed:
                await conn.execute(
                    """UPDATE a2a_push_configs SET attempts = attempts + 1, next_attempt_at = %s
                       WHERE tenant_id = %s AND task_id = %s AND config_id = %s""",
                    (retry_at, c.tenant_id, c.task_id, c.config_id))
                return
            await conn.execute(
                """UPDATE a2a_push_configs SET seen_status = %s, delivered_state = COALESCE(%s, delivered_state),
                     attempts = 0, next_attempt_at = now()
                   WHERE tenant_id = %s AND task_id = %s AND config_id = %s""",
                (status, state, c.tenant_id, c.task_id, c.config_id))


def _config(row: Any) -> PushConfig:
    sealed = row["auth_sealed"]
    return PushConfig(row["tenant_id"], row["task_id"], row["config_id"], row["url"], row["token"],
                      row["auth_scheme"], bytes(sealed) if sealed is not None else None,
                      int(row["delivered_state"]), int(row["attempts"]))


__all__ = ["A2ACall", "A2ACallStore", "A2APushStore", "DueLook", "PushConfig", "a2a_call_key"]
