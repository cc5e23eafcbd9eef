"""Answers to application ("client") tool calls: a run's call parks on `client_tool_key`; the
application's `POST /v1/runs/{id}/tool_results` stores the answer here and pokes the key; the
re-invoked call reads it (builtins/client.py). One answer per call: a different second one is
refused; the same one again, while the run still waits (its wake was lost), is accepted so that
the caller's retry wakes it. The storing statement records the poke too (store/waits.py, durable
pokes), so a crash between the commit and the poke delays the wake by one sweeper period."""

from __future__ import annotations

from dataclasses import dataclass

from treadle.domain.events import EventType
from treadle.errors import Conflict, NotFound
from treadle.store.db import Pool
from treadle.store.waits import POKE_SOON_SQL


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
        call in the tenant; Conflict: it was answered already — differently, or the run has taken
        the answer — or it timed out). The same answer again while the run still waits is accepted."""
        sql = """
        WITH waiting AS (
            SELECT 1 FROM runs r JOIN run_waits w ON w.run_id = r.id
            WHERE r.id = %(run)s AND r.tenant_id = %(tenant)s AND w.tool_use_id = %(tu)s AND w.kind = 'client_tool'
        ), ins AS (
            INSERT INTO client_tool_results (run_id, tool_use_id, tenant_id, content, is_error)
            SELECT %(run)s, %(tu)s, %(tenant)s, %(content)s, %(err)s FROM waiting
            ON CONFLICT DO NOTHING
            RETURNING 1
        ), poke AS (
            {poke}
        )
        SELECT EXISTS (SELECT 1 FROM waiting) AS waiting, EXISTS (SELECT 1 FROM ins) AS stored,
               EXISTS (SELECT 1 FROM client_tool_results WHERE run_id = %(run)s AND tool_use_id = %(tu)s
                       AND content = %(content)s AND is_error = %(err)s) AS same,
               EXISTS (SELECT 1 FROM runs WHERE id = %(run)s AND tenant_id = %(tenant)s) AS run_exists,
               EXISTS (SELECT 1 FROM events WHERE run_id = %(run)s AND type = '{parked}'
                       AND payload->'tool_use'->>'id' = %(tu)s AND payload->'wait'->>'kind' = 'client_tool') AS asked
        """.format(poke=POKE_SOON_SQL.format(select="SELECT %(tenant)s, %(key)s, now() FROM ins"),
                   parked=EventType.TOOL_PARKED)
        params = {"run": run_id, "tenant": tenant_id, "tu": tool_use_id, "content": content, "err": is_error,
                  "key": client_tool_key(run_id, tool_use_id)}
        async with self.pool.connection() as conn:
            cur = await conn.execute(sql, params)
            row = await cur.fetchone()
        assert row is not None
        if row["stored"] or (row["waiting"] and row["same"]):
            return  # stored now, or stored before and the run still sleeps: the caller's poke wakes it
        if not row["run_exists"] or not row["asked"]:
            raise NotFound(f"run {run_id} has no application tool call {tool_use_id!r}", code="tool_call_not_found")
        raise Conflict(f"the call {tool_use_id!r} of run {run_id} is not waiting for a result (answered or timed out)",
                       code="tool_call_not_waiting")
