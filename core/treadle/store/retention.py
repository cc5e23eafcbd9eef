"""Retention beyond runs (store/runs.py `purge_finished`): channel messages past their tenant's
days since published, and memory rows not written for their tenant's days — each deleted in one
bounded batch per call (`FOR UPDATE SKIP LOCKED`: a row a live step or a reader holds is left for
the next batch, never waited on). A memory row's embedding goes with it (ON DELETE CASCADE) and
its scope's byte count with its trigger (migration 0041). Stored OpenAI responses past their days
since created (an agent's response also goes with its run: migration 0071).

Archiving (`purge_archived`, config `retention.archive`): in one transaction per batch, the expired
rows are locked (`FOR UPDATE SKIP LOCKED`), read whole (a run tree with its events), handed to the
archiver (which writes them to a volume) and only then deleted — a crash before the commit leaves
them for the next batch, which archives them again under the same file names."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from treadle.store.db import Pool

#: (class, [(tenant, user or "", the row as JSON text)]) → written somewhere durable, or raises
#: (nothing deleted). The JSON is Postgres's own text of the row: no parsing and re-encoding here,
#: so a batch costs the event loop next to nothing (the workers' steps share it)
Archiver = Callable[[str, list[tuple[str, str, str]]], Awaitable[None]]

_FILTER = "(%(tenant)s::text IS NULL OR tenant_id = %(tenant)s) AND NOT (tenant_id = ANY(%(exclude)s))"

#: the archive's reads: (select the batch with its rows, locked; delete what was selected)
_ARCHIVED: dict[str, tuple[str, str]] = {
    "channel_messages": (
        "SELECT m.id, m.tenant_id, CASE WHEN c.scope = 'user' THEN m.scope_id ELSE '' END AS who,"
        " to_jsonb(m)::text AS doc"
        " FROM channel_messages m LEFT JOIN channels c ON c.tenant_id = m.tenant_id AND c.name = m.channel"
        " WHERE m.published_at < now() - make_interval(days => %(days)s)"
        " AND (%(tenant)s::text IS NULL OR m.tenant_id = %(tenant)s) AND NOT (m.tenant_id = ANY(%(exclude)s))"
        " ORDER BY m.published_at LIMIT %(limit)s FOR UPDATE OF m SKIP LOCKED",
        "DELETE FROM channel_messages WHERE id = ANY(%(keys)s)"),
    "memory": (
        "SELECT ctid::text AS id, tenant_id,"
        " CASE WHEN scope = 'user' THEN scope_id ELSE '' END AS who, (to_jsonb(m) - 'embedding')::text AS doc"
        " FROM memory m"
        " WHERE updated_at < now() - make_interval(days => %(days)s) AND " + _FILTER +
        " ORDER BY updated_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED",
        "DELETE FROM memory WHERE ctid = ANY(%(keys)s::tid[])"),  # locked since the select: the same rows
    "responses": (
        "SELECT ctid::text AS id, tenant_id, coalesce(user_id, '') AS who, to_jsonb(r)::text AS doc"
        " FROM openai_responses r WHERE created_at < now() - make_interval(days => %(days)s) AND " + _FILTER +
        " ORDER BY created_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED",
        "DELETE FROM openai_responses WHERE ctid = ANY(%(keys)s::tid[])"),
}

_RUN_ROOTS = """
SELECT id FROM runs WHERE parent_run_id IS NULL AND status IN ('completed','failed','cancelled')
   AND completed_at < now() - make_interval(days => %(days)s) AND """ + _FILTER + """
 ORDER BY completed_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED"""
_RUN_TREES = """
SELECT r.id, r.tenant_id, coalesce(r.user_id, '') AS who,
       jsonb_build_object('run', to_jsonb(r), 'events', coalesce(
           (SELECT jsonb_agg(jsonb_build_object('seq', e.seq, 'type', e.type, 'payload', e.payload,
                                                'created_at', e.created_at) ORDER BY e.seq)
              FROM events e WHERE e.run_id = r.id), '[]'))::text AS doc
  FROM runs r WHERE r.root_run_id = ANY(%(roots)s) AND r.status IN ('completed','failed','cancelled')
 ORDER BY r.root_run_id, r.created_at, r.id"""
_RUN_DELETE = """
DELETE FROM runs WHERE root_run_id = ANY(%(roots)s) AND status IN ('completed','failed','cancelled')"""

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

    async def purge_archived(self, cls: str, days: int, archive: Archiver, *, tenant_id: str | None = None,
                             exclude: list[str] | None = None, limit: int = 200) -> int:
        """One batch of class `cls` (runs, channel_messages, memory, responses) older than `days`,
        archived (`archive`) and then deleted in the same transaction: how many rows (runs: run
        trees' runs) went."""
        params: dict[str, Any] = {"days": days, "tenant": tenant_id, "exclude": exclude or [], "limit": limit}
        async with self.pool.connection() as conn, conn.transaction():
            if cls == "runs":
                cur = await conn.execute(_RUN_ROOTS, params)
                roots = [r["id"] for r in await cur.fetchall()]
                if not roots:
                    return 0
                cur = await conn.execute(_RUN_TREES, {"roots": roots})
                rows = [(r["tenant_id"], r["who"], r["doc"]) for r in await cur.fetchall()]
                await archive(cls, rows)
                cur = await conn.execute(_RUN_DELETE, {"roots": roots})
                return cur.rowcount
            select, delete = _ARCHIVED[cls]
            cur = await conn.execute(select, params)
            found = await cur.fetchall()
            if not found:
                return 0
            await archive(cls, [(r["tenant_id"], r["who"], r["doc"]) for r in found])
            cur = await conn.execute(delete, {"keys": [r["id"] for r in found]})
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
