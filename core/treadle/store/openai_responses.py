"""Stored responses of OpenAI's Responses API (migration 0070; api/openai_compat/responses.py):
the accepted request, its input items (with ids), the run turn an agent's response is (run id
and the seq it starts after) and, once finished, the response document."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg.types.json import Jsonb

from treadle.store.db import Pool

_COLUMNS = ("id, tenant_id, user_id, created_unix, background, request, input_items, previous_response_id,"
            " run_id, start_seq, doc")


@dataclass(slots=True)
class StoredResponse:
    id: str
    tenant_id: str
    user_id: str | None
    created_unix: int
    background: bool
    request: dict[str, Any]
    input_items: list[dict[str, Any]]
    previous_response_id: str | None
    run_id: str | None
    start_seq: int | None
    doc: dict[str, Any] | None


class ResponseStore:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def create(self, r: StoredResponse) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(
                f"INSERT INTO openai_responses ({_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                (r.id, r.tenant_id, r.user_id, r.created_unix, r.background, Jsonb(r.request), Jsonb(r.input_items),
                 r.previous_response_id, r.run_id, r.start_seq, None if r.doc is None else Jsonb(r.doc)))

    async def get(self, tenant_id: str, response_id: str) -> StoredResponse | None:
        async with self.pool.connection() as conn:
            cur = await conn.execute(f"SELECT {_COLUMNS} FROM openai_responses WHERE tenant_id = %s AND id = %s",
                                     (tenant_id, response_id))
            row = await cur.fetchone()
        return StoredResponse(**row) if row else None

    async def finish(self, tenant_id: str, response_id: str, doc: dict[str, Any], *, only_unset: bool = True) -> bool:
        """Keep the finished document (the first one wins unless only_unset is False)."""
        cond = " AND doc IS NULL" if only_unset else ""
        async with self.pool.connection() as conn:
            cur = await conn.execute(f"UPDATE openai_responses SET doc = %s WHERE tenant_id = %s AND id = %s{cond}",
                                     (Jsonb(doc), tenant_id, response_id))
            return cur.rowcount > 0

    async def delete(self, tenant_id: str, response_id: str) -> bool:
        async with self.pool.connection() as conn:
            cur = await conn.execute("DELETE FROM openai_responses WHERE tenant_id = %s AND id = %s",
                                     (tenant_id, response_id))
            return cur.rowcount > 0
