"""Resident sub-agents' rows (migration 0067): a child run opened by `Agent op=open` that stays
alive between messages as an interactive run parked for input (builtins/resident.py).

The child itself is an ordinary run row (interactive, `parent_run_id`, `root_run_id`, `depth`,
`parent_wait_key`: the key its parent's open/send/poll/cancel calls park on); `resident_children`
adds its idle time-to-live, when its parent last sent to it, and when and why it was closed. A
closed resident's run is cancelled (store/subruns.py `request_cancel_tree`) by whoever closed it;
`due` finds the ones to close — idle past their TTL (counted from the later of the last send and
the child's last step), parent ended, or ended on their own — for the sweeper.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from treadle.domain.events import EventType, sql_in
from treadle.store.db import Pool

_TERMINAL = "('completed','failed','cancelled')"
#: the events that say where a child's turns begin and end, and what it said (`turn_events`)
_TURN_TYPES = sql_in(EventType.TEXT, EventType.USER_INPUT, EventType.TURN_CANCELLED, EventType.AWAITING_INPUT,
                     EventType.CONTEXT_COMPACTION, EventType.COMPACTION_FAILED)
#: the state loomcycle reports: closed, the child's end, parked for input (no input queued), or mid-turn
_STATE = f"""CASE WHEN r.closed_at IS NOT NULL THEN 'closed'
  WHEN c.status IN {_TERMINAL} THEN c.status
  WHEN c.status = 'waiting' AND EXISTS (SELECT 1 FROM run_waits w WHERE w.run_id = c.id AND w.kind = 'awaiting_input')
       AND NOT EXISTS (SELECT 1 FROM run_inputs i WHERE i.run_id = c.id AND i.consumed_at IS NULL)
  THEN 'awaiting_input' ELSE 'running' END"""
_COLUMNS = f"""r.run_id, r.tenant_id, r.parent_run_id, r.agent, r.idle_ttl_s, r.last_used_at, r.closed_at,
  r.close_reason, r.created_at, c.status, c.input_seq, c.parent_wait_key, c.user_id, c.agent_id,
  coalesce(p.agent_id, p.id) AS parent_agent_id, {_STATE} AS state"""
_FROM = "resident_children r JOIN runs c ON c.id = r.run_id LEFT JOIN runs p ON p.id = r.parent_run_id"


@dataclass(slots=True)
class Resident:
    run_id: str
    tenant_id: str
    parent_run_id: str
    agent: str
    idle_ttl_s: int
    last_used_at: datetime
    closed_at: datetime | None
    close_reason: str | None
    created_at: datetime
    #: the child run's status, newest queued input id and the key its parent parks on
    status: str
    input_seq: int
    wait_key: str
    #: running | awaiting_input | completed | failed | cancelled | closed
    state: str
    user_id: str | None = None
    agent_id: str | None = None
    parent_agent_id: str | None = None

    @property
    def closed(self) -> bool:
        return self.closed_at is not None

    @property
    def ended(self) -> bool:
        return self.status in ("completed", "failed", "cancelled")

    def to_api(self) -> dict[str, Any]:
        """loomcycle's residentInfo (GET /v1/_resident), plus treadle's parent and close facts."""
        out: dict[str, Any] = {
            "child_run_id": self.run_id, "agent_id": self.agent_id or self.run_id, "agent": self.agent,
            "parent_agent_id": self.parent_agent_id or self.parent_run_id, "parent_run_id": self.parent_run_id,
            "tenant_id": self.tenant_id, "state": self.state, "idle_ttl_seconds": self.idle_ttl_s,
            "last_used_at": self.last_used_at.isoformat(), "created_at": self.created_at.isoformat(),
        }
        if self.closed_at is not None:
            out["closed_at"] = self.closed_at.isoformat()
            out["close_reason"] = self.close_reason
        return out


def _resident(row: dict[str, Any]) -> Resident:
    return Resident(
        run_id=row["run_id"], tenant_id=row["tenant_id"], parent_run_id=row["parent_run_id"], agent=row["agent"],
        idle_ttl_s=int(row["idle_ttl_s"]), last_used_at=row["last_used_at"], closed_at=row["closed_at"],
        close_reason=row["close_reason"], created_at=row["created_at"], status=row["status"],
        input_seq=int(row["input_seq"] or 0), wait_key=row["parent_wait_key"] or "", state=row["state"],
        user_id=row["user_id"], agent_id=row["agent_id"], parent_agent_id=row["parent_agent_id"],
    )


class ResidentStore:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def add(self, tenant_id: str, run_id: str, parent_run_id: str, agent: str, idle_ttl_s: int) -> None:
        """Record a resident child (idempotent: a re-invoked `open` finds its row)."""
        async with self.pool.connection() as conn:
            await conn.execute(
                "INSERT INTO resident_children (run_id, tenant_id, parent_run_id, agent, idle_ttl_s)"
                " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (run_id) DO NOTHING",
                (run_id, tenant_id, parent_run_id, agent, idle_ttl_s))

    async def get(self, tenant_id: str | None, run_id: str) -> Resident | None:
        """The resident of that run id (tenant None: any tenant's — the operator's routes)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(f"SELECT {_COLUMNS} FROM {_FROM} WHERE r.run_id = %s"
                                     " AND (%s::text IS NULL OR r.tenant_id = %s)", (run_id, tenant_id, tenant_id))
            row = await cur.fetchone()
        return _resident(row) if row else None

    async def listing(self, tenant_id: str | None, *, include_closed: bool = False, parent_run_id: str | None = None,
                   limit: int = 500) -> list[Resident]:
        """Residents newest first: open ones (not closed, child not ended) unless `include_closed`;
        of one tenant (None: every tenant — the operator's view), of one parent run."""
        where = ["true"]
        params: list[Any] = []
        if tenant_id is not None:
            where.append("r.tenant_id = %s")
            params.append(tenant_id)
        if parent_run_id is not None:
            where.append("r.parent_run_id = %s")
            params.append(parent_run_id)
        if not include_closed:
            where.append(f"r.closed_at IS NULL AND c.status NOT IN {_TERMINAL}")
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"SELECT {_COLUMNS} FROM {_FROM} WHERE {' AND '.join(where)} ORDER BY r.created_at DESC LIMIT %s",
                (*params, limit))
            rows = await cur.fetchall()
        return [_resident(r) for r in rows]

    async def count_open(self, tenant_id: str, parent_run_id: str) -> int:
        """How many residents `parent_run_id` holds open (its cap)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"SELECT count(*) AS n FROM {_FROM} WHERE r.parent_run_id = %s AND r.tenant_id = %s"
                f" AND r.closed_at IS NULL AND c.status NOT IN {_TERMINAL}", (parent_run_id, tenant_id))
            row = await cur.fetchone()
        return int(row["n"]) if row else 0

    async def touch(self, tenant_id: str, run_id: str) -> None:
        """A send: the idle clock starts again."""
        async with self.pool.connection() as conn:
            await conn.execute("UPDATE resident_children SET last_used_at = now() WHERE run_id = %s AND tenant_id = %s",
                               (run_id, tenant_id))

    async def mark_closed(self, tenant_id: str, run_id: str, reason: str) -> bool:
        """Close the row (True) unless it was closed already (idempotent)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "UPDATE resident_children SET closed_at = now(), close_reason = %s"
                " WHERE run_id = %s AND tenant_id = %s AND closed_at IS NULL RETURNING run_id",
                (reason, run_id, tenant_id))
            return await cur.fetchone() is not None

    async def close_children(self, tenant_id: str, parent_run_id: str, reason: str) -> list[str]:
        """Close every open resident of `parent_run_id`; the ids of those whose run has not ended
        (they must be cancelled)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "UPDATE resident_children r SET closed_at = now(), close_reason = %s FROM runs c"
                " WHERE c.id = r.run_id AND r.parent_run_id = %s AND r.tenant_id = %s AND r.closed_at IS NULL"
                f" RETURNING r.run_id, c.status NOT IN {_TERMINAL} AS live",
                (reason, parent_run_id, tenant_id))
            rows = await cur.fetchall()
        return [r["run_id"] for r in rows if r["live"]]

    async def due(self, limit: int = 200) -> list[tuple[str, str, str, bool]]:
        """Close the residents that are done for (the sweeper): idle past their TTL — no send and
        no step of the child for `idle_ttl_s` —, parent ended (or gone), or ended on their own.
        Returns (tenant_id, run_id, reason, live) — `live`: its run must still be cancelled."""
        sql = f"""
        WITH due AS (
            SELECT r.run_id,
                   CASE WHEN c.status IN {_TERMINAL} THEN 'ended: ' || c.status
                        WHEN p.id IS NULL OR p.status IN {_TERMINAL} THEN 'parent run ended'
                        ELSE 'idle timeout' END AS why,
                   c.status NOT IN {_TERMINAL} AS live
            FROM {_FROM}
            WHERE r.closed_at IS NULL AND (
                c.status IN {_TERMINAL} OR p.id IS NULL OR p.status IN {_TERMINAL}
                OR greatest(r.last_used_at, c.updated_at) + make_interval(secs => r.idle_ttl_s) < now())
            ORDER BY r.created_at LIMIT %s FOR UPDATE OF r SKIP LOCKED
        )
        UPDATE resident_children r SET closed_at = now(), close_reason = due.why FROM due
        WHERE r.run_id = due.run_id
        RETURNING r.tenant_id, r.run_id, due.why, due.live
        """
        async with self.pool.connection() as conn:
            cur = await conn.execute(sql, (limit,))
            rows = await cur.fetchall()
        return [(r["tenant_id"], r["run_id"], r["why"], bool(r["live"])) for r in rows]

    async def settled_waits(self, limit: int = 200) -> list[tuple[str, str]]:
        """(tenant_id, key) of parents parked on a resident whose turn is over — the child ended,
        or parked for input with every queued input consumed by its transcript — although the
        parent still waits: the child's wake-up after its commit was lost (a crash in between).
        The woken parent's call looks again and parks again when its turn is not the one that ended."""
        sql = f"""
        SELECT DISTINCT w.tenant_id, w.key
        FROM run_waits w JOIN runs p ON p.id = w.run_id AND p.status = 'waiting'
        JOIN runs c ON c.parent_run_id = w.run_id AND c.parent_wait_key = w.key
        WHERE w.kind = 'resident' AND (
            c.status IN {_TERMINAL}
            OR (c.status = 'waiting'
                AND EXISTS (SELECT 1 FROM run_waits cw WHERE cw.run_id = c.id AND cw.kind = 'awaiting_input')
                AND c.input_seq <= coalesce((
                    SELECT max((e.payload->>'input_id')::bigint) FROM events e
                    WHERE e.run_id = c.id AND e.type IN {sql_in(EventType.USER_INPUT, EventType.TURN_CANCELLED)}
                      AND e.payload ? 'input_id'), 0)))
        LIMIT %s
        """
        async with self.pool.connection() as conn:
            cur = await conn.execute(sql, (limit,))
            rows = await cur.fetchall()
        return [(r["tenant_id"], r["key"]) for r in rows]

    async def turn_events(self, tenant_id: str, run_id: str) -> list[tuple[int, str, dict[str, Any]]]:
        """The child's events that say where its turns begin and end, and what it said."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"SELECT seq, type, payload FROM events WHERE run_id = %s AND tenant_id = %s AND type IN {_TURN_TYPES}"
                " ORDER BY seq", (run_id, tenant_id))
            rows = await cur.fetchall()
        return [(r["seq"], r["type"], r["payload"]) for r in rows]
