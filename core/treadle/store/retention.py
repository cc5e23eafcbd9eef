"""Retention beyond runs (store/runs.py `purge_finished`): channel messages past their tenant's
days since published, and memory rows not written for their tenant's days — each deleted in one
bounded batch per call (`FOR UPDATE SKIP LOCKED`: a row a live step or a reader holds is left for
the next batch, never waited on). A memory row's embedding goes with it (ON DELETE CASCADE) and
its scope's byte count with its trigger (migration 0041). Stored OpenAI responses past their days
since created (an agent's response also goes with its run: migration 0071)."""

from __future__ import annotations

from typing import Any

from treadle.store.db import Pool

_CHANNEL = """
WITH doomed AS (
    SELECT id FROM channel_messages
     WHERE published_at < now() - make_interval(days => %(days)s)
       AND (%(tenant)s::text IS NULL OR tenant_id = %(tenant)s) AND NOT (tenant_id = ANY(%(exclude)s))
     ORDER BY published_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
DELETE FROM channel_messages m USING doomed WHERE m.id = doomed.id"""

_MEMORY = """
WITH doomed AS (
    SELECT tenant_id, scope, scope_id, key FROM memory
     WHERE updated_at < now() - make_interval(days => %(days)s)
       AND (%(tenant)s::text IS NULL OR tenant_id = %(tenant)s) AND NOT (tenant_id = ANY(%(exclude)s))
     ORDER BY updated_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
DELETE FROM memory m USING doomed
 WHERE (m.tenant_id, m.scope, m.scope_id, m.key) = (doomed.tenant_id, doomed.scope, doomed.scope_id, doomed.key)"""

_RESPONSES = """
WITH doomed AS (
    SELECT tenant_id, id FROM openai_responses
     WHERE created_at < now() - make_interval(days => %(days)s)
       AND (%(tenant)s::text IS NULL OR tenant_id = %(tenant)s) AND NOT (tenant_id = ANY(%(exclude)s))
     ORDER BY created_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
DELETE FROM openai_responses r USING doomed WHERE (r.tenant_id, r.id) = (doomed.tenant_id, doomed.id)"""

_PREVIEW = {
    "runs": "SELECT count(*) AS n FROM runs WHERE tenant_id = %(tenant)s AND parent_run_id IS NULL"
            " AND status IN ('completed','failed','cancelled')"
            " AND completed_at < now() - make_interval(days => %(days)s)",
    "channel_messages": "SELECT count(*) AS n FROM channel_messages WHERE tenant_id = %(tenant)s"
                        " AND published_at < now() - make_interval(days => %(days)s)",
    "memory": "SELECT count(*) AS n FROM memory WHERE tenant_id = %(tenant)s"
              " AND updated_at < now() - make_interval(days => %(days)s)",
    "responses": "SELECT count(*) AS n FROM openai_responses WHERE tenant_id = %(tenant)s"
                 " AND created_at < now() - make_interval(days => %(days)s)",
}


class RetentionStore:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def purge(self, cls: str, days: int, *, tenant_id: str | None = None, exclude: list[str] | None = None,
                    limit: int = 500) -> int:
        """One batch of class `cls` (channel_messages, memory, responses) older than `days`: rows
        deleted."""
        query = {"channel_messages": _CHANNEL, "memory": _MEMORY, "responses": _RESPONSES}[cls]
        params: dict[str, Any] = {"days": days, "tenant": tenant_id, "exclude": exclude or [], "limit": limit}
        async with self.pool.connection() as conn:
            cur = await conn.execute(query, params)
            return cur.rowcount

    async def purgeable(self, tenant_id: str, policy: dict[str, int | None]) -> dict[str, int]:
        """What the tenant's policy would delete now, per class (a preview; classes kept forever: 0)."""
        out: dict[str, int] = {}
        async with self.pool.connection() as conn:
            for cls, days in policy.items():
                if days is None:
                    out[cls] = 0
                    continue
                cur = await conn.execute(_PREVIEW[cls], {"tenant": tenant_id, "days": days})
                row = await cur.fetchone()
                out[cls] = int(row["n"]) if row else 0
        return out
