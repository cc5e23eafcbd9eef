"""A user's runs whose row changed since a moment: what loomcycle's
`GET /v1/users/{user_id}/agents/stream` sends as `run_state` frames (api/agentstream.py).

treadle has no in-process bus of run transitions that reaches every process (a run moves in
whichever worker holds it), so the stream reads the rows: a run's `updated_at` moves with each
of its status changes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from treadle.store.db import Pool


@dataclass(frozen=True, slots=True)
class RunState:
    run_id: str
    agent_id: str
    agent: str
    user_id: str
    parent_agent_id: str | None
    status: str
    stop_reason: str | None
    error: dict[str, Any] | None
    updated_at: datetime
    parent_context: dict[str, Any] | None


async def db_now(pool: Pool) -> datetime:
    async with pool.connection() as conn:
        row = await (await conn.execute("SELECT now() AS now")).fetchone()
    assert row is not None
    now: datetime = row["now"]
    return now


async def user_run_states(pool: Pool, tenant_id: str, user_id: str, since: datetime,
                          limit: int = 500) -> list[RunState]:
    """The user's runs updated after `since`, oldest change first."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            """SELECT r.id, coalesce(r.agent_id, r.id) AS agent_id, r.agent, r.user_id,
                      coalesce(p.agent_id, p.id) AS parent_agent_id, r.status, r.stop_reason, r.error,
                      r.updated_at, r.parent_context
               FROM runs r LEFT JOIN runs p ON p.id = r.parent_run_id AND p.tenant_id = r.tenant_id
               WHERE r.tenant_id = %s AND r.user_id = %s AND r.updated_at > %s
               ORDER BY r.updated_at, r.id LIMIT %s""",
            (tenant_id, user_id, since, limit))
        rows = await cur.fetchall()
    return [RunState(run_id=r["id"], agent_id=r["agent_id"], agent=r["agent"], user_id=r["user_id"],
                     parent_agent_id=r["parent_agent_id"], status=r["status"], stop_reason=r["stop_reason"],
                     error=r["error"], updated_at=r["updated_at"], parent_context=r["parent_context"])
            for r in rows]
