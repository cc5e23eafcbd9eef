"""Memory consolidation's rows (migration 0094; loomcycle's RFC BL P2): per target (tenant, scope,
scope_id) a forward-only watermark and a lease (`memory_cursors`), the queue `Memory add` fills
while a consolidator is deployed (`memory_pending`), the soft archive of a memory entry
(`memory.superseded_at`), and the scan for settled chats past a watermark.

A chat (a session) is *settled* when every run in it has ended; its settled time is its runs'
latest `completed_at`. The scan orders by (settled time, session id) and returns only what is
strictly after the watermark, so consolidating a page and advancing to its last row skips nothing.
Every statement runs on the caller's connection — inside a step, the step's transaction."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from treadle.store.db import Pool

#: runs whose status ends them
_ENDED = "('completed', 'failed', 'cancelled')"
_SETTLED = f"""
    SELECT s.id AS session_id, s.user_id, max(r.completed_at) AS settled_at
      FROM sessions s JOIN runs r ON r.tenant_id = s.tenant_id AND r.session_id = s.id
     WHERE s.tenant_id = %(t)s AND {{where}}
     GROUP BY s.id, s.user_id
    HAVING bool_and(r.status IN {_ENDED}) AND max(r.completed_at) IS NOT NULL"""


@dataclass(frozen=True, slots=True)
class Cursor:
    watermark_completed_at: datetime | None = None
    watermark_session_id: str = ""
    leased_by: str = ""
    lease_expires_at: datetime | None = None
    lease_live: bool = False

    def to_api(self) -> dict[str, Any]:
        return {
            "watermark_completed_at": _iso(self.watermark_completed_at),
            "watermark_session_id": self.watermark_session_id,
            "leased_by": self.leased_by,
            "lease_expires_at": _iso(self.lease_expires_at),
        }


@dataclass(frozen=True, slots=True)
class Pending:
    id: str
    payload: Any
    origin: str
    source_session_id: str | None
    source_run_id: str | None
    created_at: datetime

    def to_api(self) -> dict[str, Any]:
        return {"id": self.id, "payload": self.payload, "origin": self.origin,
                "source_session_id": self.source_session_id or "", "source_run_id": self.source_run_id or "",
                "created_at": _iso(self.created_at)}


def _iso(t: datetime | None) -> str | None:
    return t.isoformat() if t is not None else None


_CURSOR = ("SELECT watermark_completed_at, watermark_session_id, leased_by, lease_expires_at,"
           " coalesce(lease_expires_at > now(), false) AS lease_live FROM memory_cursors")


def _cursor(row: dict[str, Any] | None) -> Cursor:
    return Cursor(**row) if row is not None else Cursor()


class ConsolidationStore:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def cursor(self, tenant: str, scope: str, scope_id: str) -> Cursor:
        async with self.pool.connection() as conn:
            cur = await conn.execute(_CURSOR + " WHERE tenant_id = %s AND scope = %s AND scope_id = %s",
                                     (tenant, scope, scope_id))
            return _cursor(await cur.fetchone())

    async def lease(self, tenant: str, scope: str, scope_id: str, owner: str, ttl_s: float) -> tuple[Cursor, bool]:
        """Take (or renew) the target's lease for `owner` unless another owner holds a live one."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                """INSERT INTO memory_cursors AS c (tenant_id, scope, scope_id, leased_by, lease_expires_at)
                   VALUES (%(t)s, %(s)s, %(i)s, %(o)s, now() + make_interval(secs => %(ttl)s))
                   ON CONFLICT (tenant_id, scope, scope_id) DO UPDATE
                   SET leased_by = %(o)s, lease_expires_at = now() + make_interval(secs => %(ttl)s), updated_at = now()
                   WHERE c.leased_by IN ('', %(o)s) OR c.lease_expires_at IS NULL OR c.lease_expires_at <= now()
                   RETURNING watermark_completed_at, watermark_session_id, leased_by, lease_expires_at,
                             true AS lease_live""",
                {"t": tenant, "s": scope, "i": scope_id, "o": owner, "ttl": ttl_s})
            row = await cur.fetchone()
        if row is not None:
            return _cursor(row), True
        return await self.cursor(tenant, scope, scope_id), False

    async def release(self, tenant: str, scope: str, scope_id: str, owner: str) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(
                "UPDATE memory_cursors SET leased_by = '', lease_expires_at = NULL, updated_at = now()"
                " WHERE tenant_id = %s AND scope = %s AND scope_id = %s AND leased_by = %s",
                (tenant, scope, scope_id, owner))

    async def scan(self, tenant: str, user_id: str, exclude_agents: Sequence[str], after: Cursor,
                   limit: int) -> list[tuple[str, datetime]]:
        """The settled chats of `user_id` strictly after the watermark, oldest first, except those
        of `exclude_agents` (the pass itself and every `internal:` agent)."""
        sql = _SETTLED.format(where="s.user_id = %(u)s AND NOT (s.agent = ANY(%(x)s))") + (
            " AND (max(r.completed_at), s.id) > (coalesce(%(wt)s, '-infinity'::timestamptz), %(ws)s)"
            " ORDER BY 3, 1 LIMIT %(n)s")
        async with self.pool.connection() as conn:
            cur = await conn.execute(sql, {"t": tenant, "u": user_id, "x": list(exclude_agents), "n": limit,
                                           "wt": after.watermark_completed_at, "ws": after.watermark_session_id})
            return [(r["session_id"], r["settled_at"]) for r in await cur.fetchall()]

    async def settled(self, tenant: str, session_id: str) -> tuple[bool, str | None, datetime | None]:
        """(exists, its user, its settled time — None while a run of it is live)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"SELECT s.user_id, CASE WHEN bool_and(r.status IN {_ENDED}) THEN max(r.completed_at) END AS at"
                " FROM sessions s LEFT JOIN runs r ON r.tenant_id = s.tenant_id AND r.session_id = s.id"
                " WHERE s.tenant_id = %s AND s.id = %s GROUP BY s.user_id", (tenant, session_id))
            row = await cur.fetchone()
        if row is None:
            return False, None, None
        return True, row["user_id"], row["at"]

    async def advance(self, tenant: str, scope: str, scope_id: str, owner: str, at: datetime,
                      session_id: str) -> bool:
        """Move the watermark forward to (at, session_id) while `owner` holds a live lease; an equal
        or earlier point leaves it. False: the lease is not `owner`'s (nothing changed)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                """UPDATE memory_cursors SET updated_at = now(),
                          watermark_completed_at = CASE WHEN (%(a)s, %(sid)s) > (coalesce(watermark_completed_at,
                              '-infinity'::timestamptz), watermark_session_id) THEN %(a)s
                              ELSE watermark_completed_at END,
                          watermark_session_id = CASE WHEN (%(a)s, %(sid)s) > (coalesce(watermark_completed_at,
                              '-infinity'::timestamptz), watermark_session_id) THEN %(sid)s
                              ELSE watermark_session_id END
                    WHERE tenant_id = %(t)s AND scope = %(s)s AND scope_id = %(i)s AND leased_by = %(o)s
                      AND lease_expires_at > now()""",
                {"t": tenant, "s": scope, "i": scope_id, "o": owner, "a": at, "sid": session_id})
            return cur.rowcount == 1

    async def supersede(self, tenant: str, scope: str, scope_id: str, key: str) -> bool:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "UPDATE memory SET superseded_at = now() WHERE tenant_id = %s AND scope = %s AND scope_id = %s"
                " AND key = %s AND superseded_at IS NULL", (tenant, scope, scope_id, key))
            return cur.rowcount == 1

    async def enqueue(self, tenant: str, scope: str, scope_id: str, pending_id: str, payload: Any, *,
                      origin: str, source_session_id: str | None, source_run_id: str | None) -> None:
        """Queue an item; the same id again (a re-run step) is a no-op."""
        async with self.pool.connection() as conn:
            await conn.execute(
                "INSERT INTO memory_pending (id, tenant_id, scope, scope_id, payload, origin, source_session_id,"
                " source_run_id) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                (pending_id, tenant, scope, scope_id, Jsonb(payload), origin, source_session_id, source_run_id))

    async def pending(self, tenant: str, scope: str, scope_id: str, limit: int) -> list[Pending]:
        """Undrained items, oldest first (a read: `ack` is what drains)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT id, payload, origin, source_session_id, source_run_id, created_at FROM memory_pending"
                " WHERE tenant_id = %s AND scope = %s AND scope_id = %s AND drained_at IS NULL"
                " ORDER BY created_at, id LIMIT %s", (tenant, scope, scope_id, limit))
            return [Pending(**r) for r in await cur.fetchall()]

    async def pending_item(self, tenant: str, scope: str, scope_id: str, pending_id: str) -> Pending | None:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT id, payload, origin, source_session_id, source_run_id, created_at FROM memory_pending"
                " WHERE tenant_id = %s AND scope = %s AND scope_id = %s AND id = %s",
                (tenant, scope, scope_id, pending_id))
            row = await cur.fetchone()
        return Pending(**row) if row is not None else None

    async def ack(self, tenant: str, scope: str, scope_id: str, ids: Sequence[str]) -> int:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "UPDATE memory_pending SET drained_at = now() WHERE tenant_id = %s AND scope = %s AND scope_id = %s"
                " AND id = ANY(%s) AND drained_at IS NULL", (tenant, scope, scope_id, list(ids)))
            return cur.rowcount

    async def targets(self, tenant: str, exclude_agents: Sequence[str], limit: int) -> list[str]:
        """The users of `tenant` with consolidation work: a settled chat past their watermark, or an
        undrained queued item — loomcycle's fan-out probe (scope user)."""
        sql = f"""
            WITH settled AS ({_SETTLED.format(where="s.user_id <> '' AND NOT (s.agent = ANY(%(x)s))")})
            SELECT DISTINCT user_id FROM (
                SELECT st.user_id FROM settled st LEFT JOIN memory_cursors c ON c.tenant_id = %(t)s
                       AND c.scope = 'user' AND c.scope_id = st.user_id
                 WHERE (st.settled_at, st.session_id) > (coalesce(c.watermark_completed_at,
                       '-infinity'::timestamptz), coalesce(c.watermark_session_id, ''))
                UNION ALL
                SELECT scope_id FROM memory_pending WHERE tenant_id = %(t)s AND scope = 'user'
                       AND drained_at IS NULL) w
            ORDER BY user_id LIMIT %(n)s"""
        async with self.pool.connection() as conn:
            cur = await conn.execute(sql, {"t": tenant, "x": list(exclude_agents), "n": limit})
            return [r["user_id"] for r in await cur.fetchall()]
