"""Answers to application ("client") tool calls: a run's call parks on `client_tool_key`; the
application's `POST /v1/runs/{id}/tool_results` stores the answer here and pokes the key; the
re-invoked call reads it (builtins/client.py). One answer per call: a second is refused."""

from __future__ import annotations

from dataclasses import dataclass

from treadle.errors import Conflict, NotFound
from treadle.store.db import Pool


def client_tool_key(run_id: str, tool_use_id: str) -> str:
    return f"client_tool:{run_id}:{tool_use_id}"


@dataclass(frozen=True, slots=True)
class ClientAnswer:
    content: str
    is_error: bool


class ClientToolStore:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def get(self, run_id: str, tool_use_id: str) -> ClientAnswer | None:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT content, is_error FROM client_tool_results WHERE run_id = %s AND tool_use_id = %s",
                (run_id, tool_use_id),
            )
            row = await cur.fetchone()
        return ClientAnswer(row["content"], bool(row["is_error"])) if row else None

    async def answer(self, tenant_id: str, run_id: str, tool_use_id: str, content: str, is_error: bool) -> None:
        """Store the application's answer to a parked call of this run (NotFound: no such waiting
        call in the tenant; Conflict: it was answered already, or it timed out)."""
        sql = """
        WITH waiting AS (
            SELECT 1 FROM runs r JOIN run_waits w ON w.run_id = r.id
            WHERE r.id = %(run)s AND r.tenant_id = %(tenant)s AND w.tool_use_id = %(tu)s AND w.kind = 'client_tool'
        ), ins AS (
            INSERT INTO client_tool_results (run_id, tool_use_id, tenant_id, content, is_error)
            SELECT %(run)s, %(tu)s, %(tenant)s, %(content)s, %(err)s FROM waiting
            ON CONFLICT DO NOTHING
            RETURNING 1
        )
        SELECT EXISTS (SELECT 1 FROM waiting) AS waiting, EXISTS (SELECT 1 FROM ins) AS stored,
               EXISTS (SELECT 1 FROM runs WHERE id = %(run)s AND tenant_id = %(tenant)s) AS run_exists,
               EXISTS (SELECT 1 FROM events WHERE run_id = %(run)s AND type = 'tool_parked'
                       AND payload->'tool_use'->>'id' = %(tu)s AND payload->'wait'->>'kind' = 'client_tool') AS asked
        """
        params = {"run": run_id, "tenant": tenant_id, "tu": tool_use_id, "content": content, "err": is_error}
        async with self.pool.connection() as conn:
            cur = await conn.execute(sql, params)
            row = await cur.fetchone()
        assert row is not None
        if row["stored"]:
            return
        if not row["run_exists"] or not row["asked"]:
            raise NotFound(f"run {run_id} has no application tool call {tool_use_id!r}", code="tool_call_not_found")
        raise Conflict(f"the call {tool_use_id!r} of run {run_id} is not waiting for a result (answered or timed out)",
                       code="tool_call_not_waiting")
