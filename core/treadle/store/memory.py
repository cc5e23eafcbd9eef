"""Memory rows: tenant/scope/scope_id/key → JSON value, optional expiry — and the vector facet.

Quotas: one value may hold `max_value_bytes` (its compact JSON, UTF-8) and the live values of one
(tenant, scope, scope_id) together `quota_bytes` (default `max_scope_bytes`); writes to a scope
are serialized by a transaction advisory lock, so concurrent sets cannot overrun it.

Vectors (pgvector): `set(..., embedding=...)` stores the value's embedding in
`memory_embeddings` in the same transaction; a set without one drops a stale embedding; deleting
or overwriting the row cascades. `search` ranks a scope's live keys by cosine similarity to a
query vector (optionally blended with recency) — exactly for scopes of up to `exact_scan_limit`
embedded keys, through the HNSW index above that. On a server without pgvector every vector
operation raises VectorUnavailable ("pgvector not installed"); plain Memory keeps working.
"""

from __future__ import annotations

import builtins
import json
import time
from dataclasses import dataclass
from typing import Any

from psycopg.types.json import Jsonb

from treadle.errors import MemoryQuotaExceeded, ValidationFailed, VectorUnavailable
from treadle.store.db import Pool

#: a live entry: not expired, not superseded (a consolidator's soft archive, store/consolidation.py)
_LIVE = "((expires_at IS NULL OR expires_at > now()) AND superseded_at IS NULL)"
DEFAULT_MAX_VALUE_BYTES = 64 * 1024
DEFAULT_MAX_SCOPE_BYTES = 1 << 20
#: dimensions with an HNSW index (see migration 0004); others are always searched exactly
INDEXED_DIMENSIONS = (384, 768, 1024, 1536)
_ABSENT_RECHECK_S = 60.0


#: `incr` (`MemoryStore.incr`, and `Memory.incr` folded into a step commit, builtins/memory.py):
#: add `tool_d` to the key's integer (an absent or expired key counts from 0). A live value that is
#: not an integer is left untouched and the statement returns no row. `{returning}`: what it returns.
INCR = """INSERT INTO memory AS m (tenant_id, scope, scope_id, key, value, expires_at)
   VALUES (%(tool_t)s, %(tool_s)s, %(tool_i)s, %(tool_k)s, to_jsonb(%(tool_d)s::bigint),
           CASE WHEN %(tool_ttl)s::float8 IS NULL THEN NULL ELSE now() + make_interval(secs => %(tool_ttl)s) END)
   ON CONFLICT (tenant_id, scope, scope_id, key) DO UPDATE SET
     value = CASE WHEN m.expires_at IS NOT NULL AND m.expires_at <= now() THEN excluded.value
                  ELSE to_jsonb((m.value #>> '{{}}')::bigint + %(tool_d)s::bigint) END,
     expires_at = CASE WHEN %(tool_ttl)s::float8 IS NULL AND (m.expires_at IS NULL OR m.expires_at > now())
                       THEN m.expires_at ELSE excluded.expires_at END,
     updated_at = now()
   WHERE (m.expires_at IS NOT NULL AND m.expires_at <= now())
      OR (jsonb_typeof(m.value) = 'number' AND (m.value #>> '{{}}') ~ '^-?[0-9]+$')
   RETURNING {returning}"""


def incr_params(tenant: str, scope: str, scope_id: str, key: str, delta: int, ttl_s: float | None) -> dict[str, Any]:
    return {"tool_t": tenant, "tool_s": scope, "tool_i": scope_id, "tool_k": key, "tool_d": delta,
            "tool_ttl": ttl_s}


def value_size(value: Any) -> int:
    """Bytes a value counts against the limits: its compact JSON in UTF-8."""
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def vector_literal(vector: list[float]) -> str:
    return "[" + ",".join(format(float(x), ".9g") for x in vector) + "]"


def parse_vector(text: str | None) -> list[float]:
    """pgvector's text form ("[1,2,3]") as floats."""
    if not text:
        return []
    return [float(x) for x in text.strip("[]").split(",") if x]


@dataclass(slots=True)
class Embedding:
    embedder: str
    model: str
    vector: list[float]
    text: str

    @property
    def dimension(self) -> int:
        return len(self.vector)


class MemoryStore:
    def __init__(
        self, pool: Pool, *, max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES,
        max_scope_bytes: int = DEFAULT_MAX_SCOPE_BYTES,
    ) -> None:
        self.pool = pool
        self.max_value_bytes = max_value_bytes
        self.max_scope_bytes = max_scope_bytes
        #: memory_embeddings exists (True, for good) / was absent at this monotonic time
        self._vectors: bool | float | None = None

    def check_value(self, value: Any) -> int:
        size = value_size(value)
        if size > self.max_value_bytes:
            raise MemoryQuotaExceeded(f"value is {size} bytes; the limit is {self.max_value_bytes}",
                                      code="value_too_large")
        return size

    async def set(
        self, tenant: str, scope: str, scope_id: str, key: str, value: Any, ttl_s: float | None,
        *, embedding: Embedding | None = None, quota_bytes: int | None = None, keep_expiry: bool = False,
        provenance: dict[str, Any] | None = None,
    ) -> dict[str, int]:
        """Upsert the value (and its embedding, or drop a stale one); returns {size_bytes,
        scope_bytes, quota_bytes}. The entry expires `ttl_s` seconds from now (None: never) — but
        with `keep_expiry` and no `ttl_s`, a live existing entry keeps its expiry (loomcycle's
        `ttl: 0`). MemoryQuotaExceeded leaves everything unchanged."""
        size = self.check_value(value)
        quota = quota_bytes or self.max_scope_bytes
        async with self.pool.connection() as conn, conn.transaction():
            if embedding is not None:
                await self._require_vectors(conn)
            await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                                (f"memory\x1f{tenant}\x1f{scope}\x1f{scope_id}",))
            used = await self._used_by_others(conn, tenant, scope, scope_id, key, size, quota)
            if used + size > quota:
                raise MemoryQuotaExceeded(
                    f"scope {scope}/{scope_id or '-'} would hold {used + size} bytes; its quota is {quota}"
                    f" ({used} used by other keys)"
                )
            await conn.execute(
                """INSERT INTO memory (tenant_id, scope, scope_id, key, value, expires_at, provenance)
                   VALUES (%s, %s, %s, %s, %s,
                           CASE WHEN %s::float8 IS NULL THEN NULL ELSE now() + make_interval(secs => %s) END, %s)
                   ON CONFLICT (tenant_id, scope, scope_id, key) DO UPDATE
                   SET value = excluded.value, updated_at = now(), provenance = excluded.provenance,
                       superseded_at = NULL,
                       expires_at = CASE WHEN %s AND memory.expires_at > now() THEN memory.expires_at
                                         ELSE excluded.expires_at END""",
                (tenant, scope, scope_id, key, Jsonb(value), ttl_s, ttl_s,
                 None if provenance is None else Jsonb(provenance), keep_expiry and ttl_s is None),
            )
            if embedding is not None:
                await conn.execute(
                    """INSERT INTO memory_embeddings (tenant_id, scope, scope_id, key, embedder, model, dimension,
                                                      embedding, embed_text)
                       VALUES (%s, %s, %s, %s, %s, %s, %s, %s::vector, %s)
                       ON CONFLICT (tenant_id, scope, scope_id, key) DO UPDATE SET
                         embedder = excluded.embedder, model = excluded.model, dimension = excluded.dimension,
                         embedding = excluded.embedding, embed_text = excluded.embed_text, created_at = now()""",
                    (tenant, scope, scope_id, key, embedding.embedder, embedding.model, embedding.dimension,
                     vector_literal(embedding.vector), embedding.text),
                )
            elif await self._has_vectors(conn):
                await conn.execute(
                    "DELETE FROM memory_embeddings WHERE tenant_id = %s AND scope = %s AND scope_id = %s AND key = %s",
                    (tenant, scope, scope_id, key),
                )
        return {"size_bytes": size, "scope_bytes": used + size, "quota_bytes": quota}

    async def _used_by_others(
        self, conn: Any, tenant: str, scope: str, scope_id: str, key: str, size: int, quota: int,
    ) -> int:
        """Bytes the scope's other keys hold, read from the running count (`memory_scope_bytes`,
        migration 0041) — constant time however many keys the scope has. The count includes
        expired rows not yet deleted, so it is an upper bound: when it says "over quota", the
        scope's expired rows are deleted (the trigger lowers the count) and the count read again.
        Called under the scope's advisory lock."""
        query = (
            "SELECT coalesce((SELECT bytes FROM memory_scope_bytes WHERE tenant_id = %(t)s AND scope = %(s)s"
            " AND scope_id = %(i)s), 0) - coalesce((SELECT octet_length(value::text) FROM memory"
            " WHERE tenant_id = %(t)s AND scope = %(s)s AND scope_id = %(i)s AND key = %(k)s), 0) AS used"
        )
        params = {"t": tenant, "s": scope, "i": scope_id, "k": key}
        cur = await conn.execute(query, params)
        row = await cur.fetchone()
        used = int(row["used"]) if row else 0
        if used + size <= quota:
            return used
        await conn.execute(
            "DELETE FROM memory WHERE tenant_id = %(t)s AND scope = %(s)s AND scope_id = %(i)s AND key <> %(k)s"
            " AND expires_at IS NOT NULL AND expires_at <= now()", params)
        cur = await conn.execute(query, params)
        row = await cur.fetchone()
        return int(row["used"]) if row else 0

    async def usage(self, tenant: str, scope: str, scope_id: str) -> dict[str, int]:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"SELECT count(*) AS keys, coalesce(sum(octet_length(value::text)), 0)::bigint AS bytes FROM memory"
                f" WHERE tenant_id = %s AND scope = %s AND scope_id = %s AND {_LIVE}",
                (tenant, scope, scope_id),
            )
            row = await cur.fetchone()
        return {"keys": int(row["keys"]), "bytes": int(row["bytes"])} if row else {"keys": 0, "bytes": 0}

    async def get(self, tenant: str, scope: str, scope_id: str, key: str) -> tuple[bool, Any]:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"SELECT value FROM memory WHERE tenant_id = %s AND scope = %s AND scope_id = %s"
                f" AND key = %s AND {_LIVE}",
                (tenant, scope, scope_id, key),
            )
            row = await cur.fetchone()
        return (True, row["value"]) if row else (False, None)

    async def delete(self, tenant: str, scope: str, scope_id: str, key: str) -> bool:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"DELETE FROM memory WHERE tenant_id = %s AND scope = %s AND scope_id = %s AND key = %s"
                f" AND {_LIVE}",
                (tenant, scope, scope_id, key),
            )
            return cur.rowcount > 0

    async def list(
        self, tenant: str, scope: str, scope_id: str, prefix: str, limit: int
    ) -> list[dict[str, Any]]:
        like = _like(prefix)
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"SELECT key, value, updated_at, expires_at FROM memory WHERE tenant_id = %s AND scope = %s"
                f" AND scope_id = %s AND key LIKE %s AND {_LIVE} ORDER BY key LIMIT %s",
                (tenant, scope, scope_id, like, limit),
            )
            rows = await cur.fetchall()
        return [
            {
                "key": r["key"],
                "value": r["value"],
                "updated_at": r["updated_at"].isoformat(),
                "expires_at": r["expires_at"].isoformat() if r["expires_at"] else None,
            }
            for r in rows
        ]

    async def incr(
        self, tenant: str, scope: str, scope_id: str, key: str, delta: int, ttl_s: float | None
    ) -> int | None:
        """Atomically add `delta` (an absent or expired key counts from 0). None if the stored
        value is not an integer."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(INCR.format(returning="value"), incr_params(tenant, scope, scope_id, key, delta,
                                                                                  ttl_s))
            row = await cur.fetchone()
        value = row["value"] if row else None
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    async def merge(
        self, tenant: str, scope: str, scope_id: str, key: str, patch: dict[str, Any], ttl_s: float | None,
        *, quota_bytes: int | None = None,
    ) -> dict[str, Any]:
        """loomcycle's `merge`: deep-merge the object `patch` into the key's object (an absent or
        expired key counts as `{}`) under the scope's lock, and return the merged value. Nested
        objects merge key by key; anything else (arrays, scalars, null) replaces. The entry keeps
        its expiry unless `ttl_s` is given, and its provenance; a stale embedding is dropped (the
        value changed, as `set` drops one). A stored value that is not an object is refused
        (`memory_not_an_object`), a merged value over the limits raises MemoryQuotaExceeded —
        either way nothing changes."""
        quota = quota_bytes or self.max_scope_bytes
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                               (f"memory\x1f{tenant}\x1f{scope}\x1f{scope_id}",))
            cur = await conn.execute(
                f"SELECT value FROM memory WHERE tenant_id = %s AND scope = %s AND scope_id = %s AND key = %s"
                f" AND {_LIVE}", (tenant, scope, scope_id, key))
            row = await cur.fetchone()
            base = row["value"] if row is not None else {}
            if not isinstance(base, dict):
                raise ValidationFailed("existing value is not a JSON object (use set to overwrite)",
                                       code="memory_not_an_object")
            merged = deep_merge(base, patch)
            size = self.check_value(merged)
            used = await self._used_by_others(conn, tenant, scope, scope_id, key, size, quota)
            if used + size > quota:
                raise MemoryQuotaExceeded(
                    f"scope {scope}/{scope_id or '-'} would hold {used + size} bytes; its quota is {quota}"
                    f" ({used} used by other keys)")
            await conn.execute(
                """INSERT INTO memory (tenant_id, scope, scope_id, key, value, expires_at)
                   VALUES (%(t)s, %(s)s, %(i)s, %(k)s, %(v)s,
                           CASE WHEN %(ttl)s::float8 IS NULL THEN NULL ELSE now() + make_interval(secs => %(ttl)s) END)
                   ON CONFLICT (tenant_id, scope, scope_id, key) DO UPDATE
                   SET value = excluded.value, updated_at = now(),
                       provenance = CASE WHEN memory.expires_at <= now() THEN NULL ELSE memory.provenance END,
                       expires_at = CASE WHEN %(ttl)s::float8 IS NULL AND memory.expires_at > now()
                                         THEN memory.expires_at ELSE excluded.expires_at END""",
                {"t": tenant, "s": scope, "i": scope_id, "k": key, "v": Jsonb(merged), "ttl": ttl_s})
            if await self._has_vectors(conn):
                await conn.execute(
                    "DELETE FROM memory_embeddings WHERE tenant_id = %s AND scope = %s AND scope_id = %s AND key = %s",
                    (tenant, scope, scope_id, key))
        return merged

    async def entry(self, tenant: str, scope: str, scope_id: str, key: str) -> dict[str, Any] | None:
        """The live entry with its metadata (and its embedding's model, when it has one)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"SELECT key, value, created_at, updated_at, expires_at FROM memory WHERE tenant_id = %s"
                f" AND scope = %s AND scope_id = %s AND key = %s AND {_LIVE}",
                (tenant, scope, scope_id, key),
            )
            row = await cur.fetchone()
            if row is None:
                return None
            embedding = None
            if await self._has_vectors(conn):
                cur = await conn.execute(
                    "SELECT embedder, model, dimension, created_at FROM memory_embeddings"
                    " WHERE tenant_id = %s AND scope = %s AND scope_id = %s AND key = %s",
                    (tenant, scope, scope_id, key),
                )
                emb = await cur.fetchone()
                if emb is not None:
                    embedding = {"embedder": emb["embedder"], "model": emb["model"], "dimension": emb["dimension"],
                                 "embedded_at": emb["created_at"].isoformat()}
        return {
            "key": row["key"], "value": row["value"], "created_at": row["created_at"].isoformat(),
            "updated_at": row["updated_at"].isoformat(),
            "expires_at": row["expires_at"].isoformat() if row["expires_at"] else None,
            "embedding": embedding,
        }

    # -- vectors ---------------------------------------------------------------------------------

    async def require_vectors(self) -> None:
        """Raise VectorUnavailable ("pgvector not installed") unless vector Memory works here."""
        if self._vectors is True:
            return
        async with self.pool.connection() as conn:
            await self._require_vectors(conn)

    async def vectors_available(self) -> bool:
        try:
            await self.require_vectors()
        except VectorUnavailable:
            return False
        return True

    async def search(
        self, tenant: str, scope: str, scope_id: str, *, vector: builtins.list[float], model: str, k: int,
        min_score: float | None = None, recency_weight: float = 0.0, half_life_hours: float = 168.0,
        prefix: str = "", exact_scan_limit: int = 2_000, provenance: str | None = None,
        with_vectors: bool = False,
    ) -> builtins.list[dict[str, Any]]:
        """The scope's live embedded keys (embedded by `model`), best first: `similarity` is the
        cosine similarity, `score` = (1 - recency_weight)·similarity + recency_weight·2^(-age/half_life).
        `min_score` drops keys whose similarity is below it. `provenance`: "required" (facts) or
        "absent" (notes) filters on the entry's provenance. Each hit also carries its provenance,
        `access_count` (how often search returned it) and embedding model; with `with_vectors`, its
        vector (for dedup)."""
        dim = len(vector)
        if dim < 1:
            raise ValueError("empty query vector")
        params: dict[str, Any] = {
            "t": tenant, "s": scope, "i": scope_id, "model": model, "q": vector_literal(vector), "k": k,
            "min": min_score, "w": recency_weight, "hl": half_life_hours, "like": _like(prefix),
            "prov": provenance,
        }
        async with self.pool.connection() as conn, conn.transaction():
            await self._require_vectors(conn)
            approximate = False
            if dim in INDEXED_DIMENSIONS:
                # counted up to the limit only: the decision must not cost a scan of a large scope
                cur = await conn.execute(
                    "SELECT count(*) AS n FROM (SELECT 1 FROM memory_embeddings WHERE tenant_id = %(t)s"
                    " AND scope = %(s)s AND scope_id = %(i)s AND model = %(model)s LIMIT %(lim)s) c",
                    {**params, "lim": exact_scan_limit + 1},
                )
                row = await cur.fetchone()
                approximate = row is not None and int(row["n"]) > exact_scan_limit
            if approximate:
                # HNSW returns ef_search candidates before the scope filter applies: ask for plenty
                params["n"] = max(k * 10, 100)
                await conn.execute("SELECT set_config('hnsw.ef_search', %s, true)", (str(min(1000, params["n"])),))
                # the candidates carry their columns: joining back to memory_embeddings would read
                # the scope's every row (and vector) to find them
                source = f"""(
                    SELECT e.tenant_id, e.scope, e.scope_id, e.key, e.embedder, e.model, e.dimension, e.embedding
                    FROM memory_embeddings e
                    WHERE e.dimension = {dim} AND e.tenant_id = %(t)s AND e.scope = %(s)s AND e.scope_id = %(i)s
                      AND e.model = %(model)s
                    ORDER BY e.embedding::vector({dim}) <=> %(q)s::vector({dim}) LIMIT %(n)s) e"""
                # … and find their entries by key, one index probe each (a hash join would scan the scope)
                entries = """CROSS JOIN LATERAL (
                        SELECT m.value, m.updated_at, m.provenance, m.expires_at, m.superseded_at FROM memory m
                        WHERE m.tenant_id = e.tenant_id AND m.scope = e.scope AND m.scope_id = e.scope_id
                          AND m.key = e.key LIMIT 1) m"""  # LIMIT: kept a subquery, never flattened
            else:
                source = "memory_embeddings e"
                entries = """JOIN memory m ON m.tenant_id = e.tenant_id AND m.scope = e.scope
                                     AND m.scope_id = e.scope_id AND m.key = e.key"""
            cur = await conn.execute(
                f"""WITH scored AS MATERIALIZED (
                        SELECT e.key, m.value, m.updated_at, m.provenance, e.embedder, e.model,
                               {"e.embedding::text" if with_vectors else "NULL::text"} AS vector,
                               1 - (e.embedding::vector({dim}) <=> %(q)s::vector({dim})) AS similarity
                        FROM {source} {entries}
                        WHERE e.tenant_id = %(t)s AND e.scope = %(s)s AND e.scope_id = %(i)s
                          AND e.model = %(model)s AND e.dimension = {dim} AND e.key LIKE %(like)s
                          AND (%(prov)s::text IS NULL OR (%(prov)s::text = 'required') = (m.provenance IS NOT NULL))
                          AND (m.expires_at IS NULL OR m.expires_at > now()) AND m.superseded_at IS NULL),
                    best AS (
                        SELECT key, value, updated_at, provenance, embedder, model, vector, similarity,
                               (1 - %(w)s::float8) * similarity + %(w)s::float8 * exp(
                                   -ln(2) * greatest(extract(epoch FROM now() - updated_at), 0) / 3600.0
                                   / %(hl)s::float8) AS score
                        FROM scored WHERE %(min)s::float8 IS NULL OR similarity >= %(min)s::float8
                        ORDER BY score DESC, key LIMIT %(k)s)
                    SELECT b.*, coalesce(a.count, 0) AS access_count FROM best b
                    LEFT JOIN memory_access a ON a.tenant_id = %(t)s AND a.scope = %(s)s AND a.scope_id = %(i)s
                                             AND a.key = b.key
                    ORDER BY b.score DESC, b.key""",
                params,
            )
            rows = await cur.fetchall()
        out = []
        for r in rows:
            hit: dict[str, Any] = {
                "key": r["key"], "score": round(float(r["score"]), 6), "similarity": round(float(r["similarity"]), 6),
                "value": r["value"], "updated_at": r["updated_at"].isoformat(), "provenance": r["provenance"],
                "access_count": int(r["access_count"]), "embedder": r["embedder"], "model": r["model"]}
            if with_vectors:
                hit["vector"] = parse_vector(r["vector"])
            out.append(hit)
        return out

    async def record_access(self, tenant: str, scope: str, scope_id: str, keys: builtins.list[str]) -> None:
        """Count one more search return of each key (the `frequency_weight` signal)."""
        if not keys:
            return
        async with self.pool.connection() as conn:
            await conn.execute(
                """INSERT INTO memory_access AS a (tenant_id, scope, scope_id, key, count)
                   SELECT %s, %s, %s, k, 1 FROM unnest(%s::text[]) k
                   WHERE EXISTS (SELECT 1 FROM memory m WHERE m.tenant_id = %s AND m.scope = %s
                                 AND m.scope_id = %s AND m.key = k)
                   ON CONFLICT (tenant_id, scope, scope_id, key) DO UPDATE SET count = a.count + 1, last_at = now()""",
                (tenant, scope, scope_id, sorted(set(keys)), tenant, scope, scope_id))

    async def chunk_search(
        self, tenant: str, scope: str, scope_id: str, *, vector: builtins.list[float], model: str, k: int,
        min_score: float | None = None, with_vectors: bool = False, document_id: str | None = None,
    ) -> builtins.list[dict[str, Any]]:
        """The scope's embedded Document chunk bodies (chunk_embeddings) nearest `vector`, best
        first, with their chunk and document titles (Memory search's `documents` source,
        Document `search`)."""
        dim = len(vector)
        if dim < 1:
            raise ValueError("empty query vector")
        params: dict[str, Any] = {"t": tenant, "s": scope, "i": scope_id, "model": model,
                                  "q": vector_literal(vector), "k": k, "min": min_score, "doc": document_id}
        async with self.pool.connection() as conn:
            await self._require_vectors(conn)
            cur = await conn.execute(
                f"""WITH scored AS MATERIALIZED (  -- exact: a scope's chunks, never a filtered ANN pool
                    SELECT c.id AS chunk_id, c.document_id, d.title AS document, c.title, c.body, c.type,
                           c.revision, c.updated_at, e.embedder, e.model,
                           {"e.embedding::text" if with_vectors else "NULL::text"} AS vector,
                           1 - (e.embedding::vector({dim}) <=> %(q)s::vector({dim})) AS similarity
                    FROM chunk_embeddings e
                    JOIN chunks c ON c.tenant_id = e.tenant_id AND c.scope = e.scope AND c.scope_id = e.scope_id
                                 AND c.id = e.chunk_id
                    JOIN documents d ON d.tenant_id = c.tenant_id AND d.scope = c.scope AND d.scope_id = c.scope_id
                                    AND d.id = c.document_id
                    WHERE e.tenant_id = %(t)s AND e.scope = %(s)s AND e.scope_id = %(i)s AND e.model = %(model)s
                      AND e.dimension = {dim} AND (%(doc)s::text IS NULL OR c.document_id = %(doc)s::text))
                    SELECT * FROM scored WHERE %(min)s::float8 IS NULL OR similarity >= %(min)s::float8
                    ORDER BY similarity DESC, chunk_id LIMIT %(k)s""",
                params)
            rows = await cur.fetchall()
        out = []
        for r in rows:
            hit = {k: r[k] for k in ("chunk_id", "document_id", "document", "title", "body", "type", "revision",
                                     "embedder", "model")}
            hit["similarity"] = round(float(r["similarity"]), 6)
            hit["updated_at"] = r["updated_at"].isoformat()
            if with_vectors:
                hit["vector"] = parse_vector(r["vector"])
            out.append(hit)
        return out

    async def _has_vectors(self, conn: Any) -> bool:
        """Whether memory_embeddings exists (cached; an absence is re-checked after a minute)."""
        if self._vectors is True:
            return True
        if isinstance(self._vectors, float) and time.monotonic() - self._vectors < _ABSENT_RECHECK_S:
            return False
        cur = await conn.execute("SELECT to_regclass('memory_embeddings') IS NOT NULL AS present")
        row = await cur.fetchone()
        present = bool(row and row["present"])
        self._vectors = True if present else time.monotonic()
        return present

    async def _require_vectors(self, conn: Any) -> None:
        if self._vectors is True:
            return
        cur = await conn.execute("SELECT to_regclass('memory_embeddings') IS NOT NULL AS present")
        row = await cur.fetchone()
        if not (row and row["present"]):
            cur = await conn.execute(
                "SELECT CASE WHEN to_regproc('treadle_ensure_vector_memory') IS NULL THEN false"
                " ELSE treadle_ensure_vector_memory() END AS ok"
            )
            row = await cur.fetchone()
            if not (row and row["ok"]):
                self._vectors = time.monotonic()
                raise VectorUnavailable(
                    "pgvector not installed: this PostgreSQL server has no 'vector' extension, so Memory "
                    "embeddings and search are unavailable (the embedded Postgres and Aurora ship it)"
                )
        self._vectors = True


def deep_merge(base: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    """`overlay` over `base` (loomcycle's deepMerge): objects on both sides merge recursively,
    any other overlay value replaces."""
    out = dict(base)
    for k, v in overlay.items():
        below = out.get(k)
        out[k] = deep_merge(below, v) if isinstance(below, dict) and isinstance(v, dict) else v
    return out


def _like(prefix: str) -> str:
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
