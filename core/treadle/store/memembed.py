"""Embedding maintenance reads and writes over `memory_embeddings` (loomcycle 1.57-1.58's
embed_stats, reembed and backfill_embeddings; the sweeps are substrate/memembed.py).

Every write is one row in its own transaction, and only onto the entry as it was read: an entry
changed since (a new value, a new TTL) is left for the next sweep, never given the embedding of
its old text. A sweep that dies half-way (kill -9) has written whole rows only, and the rows it
did not reach are still candidates, so calling it again resumes: there is no cursor to lose.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from treadle.store.db import Pool
from treadle.store.memory import Embedding, MemoryStore, vector_literal

_LIVE = "(m.expires_at IS NULL OR m.expires_at > now())"


class MemoryEmbeddings:
    def __init__(self, memory: MemoryStore) -> None:
        self.memory = memory
        self.pool: Pool = memory.pool

    async def stats(self, tenant: str, scope: str) -> list[dict[str, Any]]:
        """Per (embedder, model, dimension) row counts of one (tenant, scope), every scope_id."""
        await self.memory.require_vectors()
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT embedder, model, dimension, count(*)::bigint AS n FROM memory_embeddings"
                " WHERE tenant_id = %s AND scope = %s GROUP BY embedder, model, dimension"
                " ORDER BY embedder, model, dimension", (tenant, scope))
            rows = await cur.fetchall()
        return [{"provider": r["embedder"], "model": r["model"], "dimension": int(r["dimension"]),
                 "row_count": int(r["n"])} for r in rows]

    async def missing(self, tenant: str, scope: str, scope_id: str, prefix: str, after: str,
                      limit: int) -> list[dict[str, Any]]:
        """Live entries with no embedding, in key order after `after` (loomcycle's MemoryEmbedListMissing)."""
        await self.memory.require_vectors()
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"""SELECT m.key, m.value, m.updated_at, NULL::text AS embed_text FROM memory m
                    WHERE m.tenant_id = %(t)s AND m.scope = %(s)s AND m.scope_id = %(i)s AND {_LIVE}
                      AND m.key LIKE %(like)s AND m.key > %(after)s
                      AND NOT EXISTS (SELECT 1 FROM memory_embeddings e WHERE e.tenant_id = m.tenant_id
                                      AND e.scope = m.scope AND e.scope_id = m.scope_id AND e.key = m.key)
                    ORDER BY m.key LIMIT %(n)s""",
                {"t": tenant, "s": scope, "i": scope_id, "like": _like(prefix), "after": after, "n": limit})
            return list(await cur.fetchall())

    async def other_model(self, tenant: str, scope: str, scope_id: str, embedder: str, model: str,
                          limit: int) -> list[dict[str, Any]]:
        """Live entries embedded by another (embedder, model) than the configured one, in key order
        (loomcycle's MemoryEmbedListByModel), with the text each was embedded from."""
        await self.memory.require_vectors()
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"""SELECT m.key, m.value, m.updated_at, e.embed_text FROM memory_embeddings e
                    JOIN memory m ON m.tenant_id = e.tenant_id AND m.scope = e.scope AND m.scope_id = e.scope_id
                                 AND m.key = e.key
                    WHERE e.tenant_id = %(t)s AND e.scope = %(s)s AND e.scope_id = %(i)s AND {_LIVE}
                      AND (e.embedder <> %(emb)s OR e.model <> %(model)s)
                    ORDER BY e.key LIMIT %(n)s""",
                {"t": tenant, "s": scope, "i": scope_id, "emb": embedder, "model": model, "n": limit})
            return list(await cur.fetchall())

    async def put(self, tenant: str, scope: str, scope_id: str, key: str, read_at: datetime,
                  embedding: Embedding) -> bool:
        """Store the entry's embedding if the entry is still the one read (`updated_at`); False if not."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                """INSERT INTO memory_embeddings (tenant_id, scope, scope_id, key, embedder, model, dimension,
                                                  embedding, embed_text)
                   SELECT m.tenant_id, m.scope, m.scope_id, m.key, %(emb)s, %(model)s, %(dim)s, %(v)s::vector,
                          %(text)s
                   FROM memory m WHERE m.tenant_id = %(t)s AND m.scope = %(s)s AND m.scope_id = %(i)s
                     AND m.key = %(k)s AND m.updated_at = %(at)s
                   ON CONFLICT (tenant_id, scope, scope_id, key) DO UPDATE SET
                     embedder = excluded.embedder, model = excluded.model, dimension = excluded.dimension,
                     embedding = excluded.embedding, embed_text = excluded.embed_text, created_at = now()""",
                {"t": tenant, "s": scope, "i": scope_id, "k": key, "at": read_at, "emb": embedding.embedder,
                 "model": embedding.model, "dim": embedding.dimension, "v": vector_literal(embedding.vector),
                 "text": embedding.text})
            return cur.rowcount > 0


def _like(prefix: str) -> str:
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
