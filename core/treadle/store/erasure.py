"""Erasure of one subject (a user id) of one tenant (issue 42 item 4), everywhere treadle keeps
it, in one transaction — loomcycle's `POST /v1/_erasure` (v1.44-1.55), with a receipt of what was
removed per table. A dry run does the same work and rolls it back, so its counts are exact.

Where a subject lives: its runs (user_id) with their sub-agent runs and everything that hangs off
a run (events, questions, inputs, waits, sealed run credentials: ON DELETE CASCADE and the events
trigger, migration 0024); its stored OpenAI responses (its own, and the turns of its runs); its
sessions; its user-scoped memory (embeddings cascade), the scope's byte count and SQL-memory
audit; its Path tree (dirents) and documents; its user-scoped channel messages and cursors; the wait keys and
timers named after its user-scoped channels; its CredentialDefs and budgets; the tokens minted
for it (their OperatorTokenDefs too) and its WebSocket watchers, and which volume files its runs
wrote and its runs' ephemeral volumes (their files: `subject_files`, deleted by the route before
this transaction). Usage is kept but anonymized:
its rows fold into the tenant's user-less rows (`user_id` ''), so the tenant's totals do not
change. The route drops its SQL-memory schemas (their own database) after the commit."""

from __future__ import annotations

from typing import Any

from treadle.store.db import Pool

#: (receipt name, statement) in order; %(t)s the tenant, %(s)s the subject
_STEPS: list[tuple[str, str]] = [
    # its stored OpenAI responses: by their user, and those that are turns of its runs (first, so
    # the receipt counts them; the runs' own deletion would take the latter too, migration 0071)
    ("openai_responses", "DELETE FROM openai_responses WHERE tenant_id = %(t)s AND (user_id = %(s)s OR run_id IN"
                         " (SELECT id FROM runs WHERE tenant_id = %(t)s AND (user_id = %(s)s OR root_run_id IN"
                         " (SELECT id FROM runs WHERE tenant_id = %(t)s AND user_id = %(s)s))))"),
    # its runs' ephemeral volume instances (their files are deleted by the route, first)
    ("volume_instances", "DELETE FROM volume_instances WHERE tenant_id = %(t)s AND root_run_id IN"
                         " (SELECT id FROM runs WHERE tenant_id = %(t)s AND user_id = %(s)s)"),
    ("runs", "DELETE FROM runs WHERE tenant_id = %(t)s AND (user_id = %(s)s OR root_run_id IN"
             " (SELECT id FROM runs WHERE tenant_id = %(t)s AND user_id = %(s)s))"),
    ("sessions", "DELETE FROM sessions WHERE tenant_id = %(t)s AND user_id = %(s)s"),
    ("memory_access", "DELETE FROM memory_access WHERE tenant_id = %(t)s AND scope = 'user' AND scope_id = %(s)s"),
    ("memory", "DELETE FROM memory WHERE tenant_id = %(t)s AND scope = 'user' AND scope_id = %(s)s"),
    ("memory_scope_bytes", "DELETE FROM memory_scope_bytes WHERE tenant_id = %(t)s AND scope = 'user'"
                           " AND scope_id = %(s)s"),
    # memory consolidation's queue and its watermark/lease for the user's scope (migration 0094)
    ("memory_pending", "DELETE FROM memory_pending WHERE tenant_id = %(t)s AND scope = 'user' AND scope_id = %(s)s"),
    ("memory_cursors", "DELETE FROM memory_cursors WHERE tenant_id = %(t)s AND scope = 'user' AND scope_id = %(s)s"),
    ("sql_memory_audit", "DELETE FROM sql_memory_audit WHERE tenant_id = %(t)s AND scope = 'user'"
                         " AND scope_id = %(s)s"),
    ("channel_messages", "DELETE FROM channel_messages m USING channels c WHERE m.tenant_id = %(t)s"
                         " AND c.tenant_id = m.tenant_id AND c.name = m.channel AND c.scope = 'user'"
                         " AND m.scope_id = %(s)s"),
    ("channel_cursors", "DELETE FROM channel_cursors WHERE tenant_id = %(t)s AND (consumer = %(s)s OR"
                        " (scope_id = %(s)s AND channel IN (SELECT name FROM channels WHERE tenant_id = %(t)s"
                        " AND scope = 'user')))"),
    ("wait_keys", "DELETE FROM wait_keys WHERE tenant_id = %(t)s AND key IN (SELECT 'channel:' || name || ':' || %(s)s"
                  " FROM channels WHERE tenant_id = %(t)s AND scope = 'user')"),
    ("wait_timers", "DELETE FROM wait_timers WHERE tenant_id = %(t)s AND key IN (SELECT 'channel:' || name || ':'"
                    " || %(s)s FROM channels WHERE tenant_id = %(t)s AND scope = 'user')"),
    ("credential_defs", "DELETE FROM credential_defs WHERE tenant_id = %(t)s AND scope = 'user' AND scope_id = %(s)s"),
    ("dirents", "DELETE FROM dirents WHERE tenant_id = %(t)s AND scope = 'user' AND scope_id = %(s)s"),
    # its user-scoped documents: edges and revisions first (they cascade from chunks; counted here)
    *((table, f"DELETE FROM {table} WHERE tenant_id = %(t)s AND scope = 'user' AND scope_id = %(s)s")
      for table in ("chunk_edges", "chunk_revisions", "chunk_tags", "document_tags", "chunks", "documents",
                    "chunk_types")),
    ("token_limits", "DELETE FROM token_limits WHERE tenant_id = %(t)s AND scope = 'user' AND scope_id = %(s)s"),
    ("auth_tokens", "DELETE FROM auth_tokens WHERE tenant_id = %(t)s AND subject = %(s)s"),
    # the OperatorTokenDefs minted for it: every version of each such token's name
    ("def_active", "DELETE FROM def_active WHERE tenant_id = %(t)s AND kind = 'operator_token' AND name IN"
                   " (SELECT name FROM defs WHERE tenant_id = %(t)s AND kind = 'operator_token'"
                   " AND body ->> 'subject' = %(s)s)"),
    ("defs", "DELETE FROM defs WHERE tenant_id = %(t)s AND kind = 'operator_token' AND name IN (SELECT name"
             " FROM defs WHERE tenant_id = %(t)s AND kind = 'operator_token' AND body ->> 'subject' = %(s)s)"),
    ("ws_connections", "DELETE FROM ws_connections WHERE tenant_id = %(t)s AND subject = %(s)s"),
    # which volume files its runs wrote (migration 0063; the files themselves: the route, first)
    ("volume_files", "DELETE FROM volume_files WHERE tenant_id = %(t)s AND user_id = %(s)s"),
]

#: the subject's usage folded into the tenant's user-less rows (same day, agent, def, model …)
_USAGE_FOLD = """
INSERT INTO usage_daily AS d (tenant_id, day, user_id, agent, def_id, provider, model, currency, calls,
                              input_tokens, output_tokens, cache_creation_tokens, cache_read_tokens, cost,
                              unpriced_calls, shard)
SELECT tenant_id, day, '', agent, def_id, provider, model, currency, sum(calls), sum(input_tokens),
       sum(output_tokens), sum(cache_creation_tokens), sum(cache_read_tokens), sum(cost), sum(unpriced_calls), shard
  FROM usage_daily WHERE tenant_id = %(t)s AND user_id = %(s)s
 GROUP BY tenant_id, day, agent, def_id, provider, model, currency, shard
ON CONFLICT (tenant_id, day, user_id, agent, def_id, provider, model, currency, shard) DO UPDATE SET
    calls = d.calls + EXCLUDED.calls, input_tokens = d.input_tokens + EXCLUDED.input_tokens,
    output_tokens = d.output_tokens + EXCLUDED.output_tokens,
    cache_creation_tokens = d.cache_creation_tokens + EXCLUDED.cache_creation_tokens,
    cache_read_tokens = d.cache_read_tokens + EXCLUDED.cache_read_tokens, cost = d.cost + EXCLUDED.cost,
    unpriced_calls = d.unpriced_calls + EXCLUDED.unpriced_calls"""


class _DryRun(Exception):
    pass


class SubjectErasure:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def subject_files(self, tenant_id: str, subject: str) -> tuple[list[tuple[str, str]], list[str]]:
        """((location, path) of the volume files the subject's runs wrote, locations of its runs'
        ephemeral volumes)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute("SELECT location, path FROM volume_files WHERE tenant_id = %s AND user_id = %s"
                                     " ORDER BY location, path", (tenant_id, subject))
            files = [(r["location"], r["path"]) for r in await cur.fetchall()]
            cur = await conn.execute("SELECT location FROM volume_instances WHERE tenant_id = %s AND root_run_id IN"
                                     " (SELECT id FROM runs WHERE tenant_id = %s AND user_id = %s) ORDER BY location",
                                     (tenant_id, tenant_id, subject))
            return files, [r["location"] for r in await cur.fetchall()]

    async def erase(self, tenant_id: str, subject: str, *, dry_run: bool) -> dict[str, Any]:
        """{"deleted": {table: rows}, "anonymized": {"usage_daily": rows}} — committed, or rolled
        back after counting (`dry_run`)."""
        params = {"t": tenant_id, "s": subject}
        deleted: dict[str, int] = {}
        anonymized: dict[str, int] = {}
        try:
            async with self.pool.connection() as conn, conn.transaction():
                cur = await conn.execute("SELECT count(*) AS n FROM events e JOIN runs r ON r.id = e.run_id"
                                         " WHERE r.tenant_id = %(t)s AND (r.user_id = %(s)s OR r.root_run_id IN"
                                         " (SELECT id FROM runs WHERE tenant_id = %(t)s AND user_id = %(s)s))",
                                         params)
                row = await cur.fetchone()
                if row and row["n"]:
                    deleted["events"] = int(row["n"])  # they go with their runs (the trigger of 0024)
                for table, statement in _STEPS:
                    cur = await conn.execute(statement, params)
                    if cur.rowcount:
                        deleted[table] = cur.rowcount
                await conn.execute(_USAGE_FOLD, params)
                cur = await conn.execute("DELETE FROM usage_daily WHERE tenant_id = %(t)s AND user_id = %(s)s",
                                         params)
                if cur.rowcount:
                    anonymized["usage_daily"] = cur.rowcount
                if dry_run:
                    raise _DryRun
        except _DryRun:
            pass
        return {"deleted": deleted, "anonymized": anonymized}
