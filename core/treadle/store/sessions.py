"""Sessions (migration 0050): a session holds many runs of one agent and user, in order
(`runs.session_seq`). A run continuing a session is created by `RunStore.create` with
`NewRun.session_id`; its history is the session's earlier runs' events, read in place
(`StepStore.session_history`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from treadle.store.db import Pool

_COLUMNS = ("id, tenant_id, agent, user_id, created_at, updated_at, title, description, tags, pinned,"
            " archived_at, summary, summary_updated_at, run_count")


@dataclass(slots=True)
class SessionRecord:
    id: str
    tenant_id: str
    agent: str
    user_id: str | None
    created_at: datetime
    updated_at: datetime
    title: str | None = None
    description: str | None = None
    tags: list[str] = field(default_factory=list)
    pinned: bool = False
    archived_at: datetime | None = None
    summary: str | None = None
    summary_updated_at: datetime | None = None
    run_count: int = 0

    def to_api(self) -> dict[str, Any]:
        """loomcycle's session object (`{id, user_id, agent, created_at, …}`), plus treadle's counts."""
        return {
            "id": self.id,
            "session_id": self.id,
            "agent": self.agent,
            "user_id": self.user_id or "",
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
            "title": self.title or "",
            "description": self.description or "",
            "tags": list(self.tags or []),
            "pinned": self.pinned,
            "archived": self.archived_at is not None,
            "archived_at": self.archived_at.isoformat() if self.archived_at else None,
            "summary": self.summary or "",
            "summary_updated_at": self.summary_updated_at.isoformat() if self.summary_updated_at else None,
            "run_count": self.run_count,
        }


@dataclass(slots=True)
class SessionEvent:
    """One event of a session's transcript: its run, the run's seq, the session-wide order."""

    run_id: str
    seq: int
    type: str
    payload: dict[str, Any]
    created_at: datetime | None


class SessionStore:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def get(self, tenant_id: str, session_id: str) -> SessionRecord | None:
        async with self.pool.connection() as conn:
            cur = await conn.execute(f"SELECT {_COLUMNS} FROM sessions WHERE id = %s AND tenant_id = %s",
                                     (session_id, tenant_id))
            row = await cur.fetchone()
        return SessionRecord(**row) if row else None

    async def list_sessions(self, tenant_id: str, *, user_id: str | None = None, agent: str | None = None,
                   include_archived: bool = False, limit: int = 50,
                   before: tuple[datetime, str] | None = None) -> list[SessionRecord]:
        """Newest activity first; pinned sessions are not reordered (the caller sorts if it wants)."""
        where = ["tenant_id = %s"]
        params: list[object] = [tenant_id]
        for column, value in (("user_id", user_id), ("agent", agent)):
            if value is not None:
                where.append(f"{column} = %s")
                params.append(value)
        if not include_archived:
            where.append("archived_at IS NULL")
        if before is not None:
            where.append("(updated_at, id) < (%s, %s)")
            params.extend(before)
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"SELECT {_COLUMNS} FROM sessions WHERE {' AND '.join(where)}"
                " ORDER BY updated_at DESC, id DESC LIMIT %s", (*params, limit))
            return [SessionRecord(**r) for r in await cur.fetchall()]

    async def update(self, tenant_id: str, session_id: str, changes: dict[str, Any]) -> SessionRecord | None:
        """Set the given metadata (`title`, `description`, `tags`, `pinned`, `archived`, `summary`)."""
        sets: list[str] = []
        params: list[object] = []
        for name in ("title", "description", "tags", "pinned"):
            if name in changes:
                sets.append(f"{name} = %s")
                params.append(changes[name])
        if "archived" in changes:
            sets.append("archived_at = CASE WHEN %s THEN coalesce(archived_at, now()) END")
            params.append(bool(changes["archived"]))
        if "summary" in changes:
            sets.append("summary = %s, summary_updated_at = now()")
            params.append(changes["summary"])
        if not sets:
            return await self.get(tenant_id, session_id)
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"UPDATE sessions SET {', '.join(sets)} WHERE id = %s AND tenant_id = %s RETURNING {_COLUMNS}",
                (*params, session_id, tenant_id))
            row = await cur.fetchone()
        return SessionRecord(**row) if row else None

    async def live_run(self, tenant_id: str, session_id: str) -> str | None:
        """The id of the session's unfinished run, if any."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT id FROM runs WHERE tenant_id = %s AND session_id = %s"
                " AND status IN ('queued','running','waiting') LIMIT 1", (tenant_id, session_id))
            row = await cur.fetchone()
        return row["id"] if row else None

    async def run_ids(self, tenant_id: str, session_id: str) -> list[str]:
        """The session's runs in order."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT id FROM runs WHERE tenant_id = %s AND session_id = %s ORDER BY session_seq",
                (tenant_id, session_id))
            return [r["id"] for r in await cur.fetchall()]

    async def events(self, tenant_id: str, session_id: str, *, after: tuple[int, int] = (-1, 0),
                     limit: int = 1000) -> list[tuple[int, SessionEvent]]:
        """A page of the session's events in order, each with its run's place in the session;
        `after` = (session_seq, seq) of the last event of the previous page."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT r.session_seq, e.run_id, e.seq, e.type, e.payload, e.created_at"
                " FROM runs r JOIN events e ON e.run_id = r.id"
                " WHERE r.tenant_id = %s AND r.session_id = %s AND (r.session_seq, e.seq) > (%s, %s)"
                " ORDER BY r.session_seq, e.seq LIMIT %s",
                (tenant_id, session_id, after[0], after[1], limit))
            rows = await cur.fetchall()
        return [(int(r["session_seq"]), SessionEvent(r["run_id"], r["seq"], r["type"], r["payload"], r["created_at"]))
                for r in rows]
