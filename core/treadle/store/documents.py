"""Documents' rows (migration 0086): documents, chunks (structure, body, fields, revision), edges,
chunk types and the body revisions, all keyed by one scope's `Tree` (tenant, scope, scope_id).

The one guarded write is `update_chunk`: it changes a chunk only if its revision is still the one
the caller read, and bumps it — a concurrent writer of the same chunk waits for the row lock,
then finds the revision moved and changes nothing (None: the caller says `stale_revision`)."""

from __future__ import annotations

from typing import Any

from psycopg.rows import DictRow
from psycopg.types.json import Jsonb

from treadle.store.db import Pool
from treadle.store.dirents import Tree

_T = "tenant_id = %s AND scope = %s AND scope_id = %s"
CHUNK_COLS = "id, document_id, parent_id, position, type, status, title, revision"
_FILTERS = {
    "document_id": "document_id = %s",
    "type": "type = %s",
    "status": "status = %s",
    "parent_id": "parent_id = %s",
}


def _jsonb(value: Any) -> Jsonb | None:
    return None if value is None else Jsonb(value)


class DocumentStore:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def _one(self, query: str, params: tuple[Any, ...]) -> DictRow | None:
        async with self.pool.connection() as conn:
            cur = await conn.execute(query, params)
            return await cur.fetchone()

    async def _all(self, query: str, params: tuple[Any, ...]) -> list[DictRow]:
        async with self.pool.connection() as conn:
            cur = await conn.execute(query, params)
            return await cur.fetchall()

    # -- documents ------------------------------------------------------------------------------

    async def create_document(
        self, t: Tree, doc_id: str, root_id: str, title: str, type_: str | None, status: str | None, actor: str | None
    ) -> None:
        """The document and its root chunk (parent null, empty body, revision 1)."""
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute(
                "INSERT INTO documents (tenant_id, scope, scope_id, id, title, root_chunk_id, type, status)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                (*t.key, doc_id, title, root_id, type_, status),
            )
            await conn.execute(
                "INSERT INTO chunks (tenant_id, scope, scope_id, id, document_id, parent_id, position, type, status,"
                " title) VALUES (%s, %s, %s, %s, %s, NULL, 0, %s, %s, %s)",
                (*t.key, root_id, doc_id, type_, status, title),
            )
            await self._revision(conn, t, root_id, 1, "", actor)

    async def document(self, t: Tree, doc_id: str) -> DictRow | None:
        return await self._one(
            f"SELECT id, title, root_chunk_id, type, status FROM documents WHERE {_T} AND id = %s", (*t.key, doc_id)
        )

    async def delete_document(self, t: Tree, doc_id: str) -> int | None:
        """The number of chunks deleted with the document (None: no such document)."""
        async with self.pool.connection() as conn, conn.transaction():
            cur = await conn.execute(
                f"SELECT count(*) AS n FROM chunks WHERE {_T} AND document_id = %s", (*t.key, doc_id)
            )
            row = await cur.fetchone()
            cur = await conn.execute(f"DELETE FROM documents WHERE {_T} AND id = %s", (*t.key, doc_id))
            return int(row["n"]) if cur.rowcount and row else None

    async def mirror_root(self, t: Tree, chunk_id: str) -> None:
        """A root chunk's type/status onto its document's row (a no-op for other chunks)."""
        async with self.pool.connection() as conn:
            await conn.execute(
                "UPDATE documents d SET type = c.type, status = c.status, updated_at = now() FROM chunks c"
                " WHERE d.tenant_id = %s AND d.scope = %s AND d.scope_id = %s AND d.root_chunk_id = %s"
                " AND c.tenant_id = d.tenant_id AND c.scope = d.scope AND c.scope_id = d.scope_id AND c.id = %s",
                (*t.key, chunk_id, chunk_id),
            )

    # -- chunks ---------------------------------------------------------------------------------

    async def chunk(self, t: Tree, chunk_id: str, *, body: bool = False) -> DictRow | None:
        cols = CHUNK_COLS + (", body, fields" if body else "")
        return await self._one(f"SELECT {cols} FROM chunks WHERE {_T} AND id = %s", (*t.key, chunk_id))

    async def insert_chunk(self, t: Tree, row: dict[str, Any], *, shift: bool, actor: str | None) -> None:
        """A new chunk at `row["position"]` (None: after its last sibling); `shift` first moves
        the siblings at or after that position one down."""
        async with self.pool.connection() as conn, conn.transaction():
            same = f"{_T} AND document_id = %s AND parent_id IS NOT DISTINCT FROM %s"
            args = (*t.key, row["document_id"], row["parent_id"])
            if row["position"] is None:
                cur = await conn.execute(f"SELECT coalesce(max(position) + 1, 0) AS p FROM chunks WHERE {same}", args)
                found = await cur.fetchone()
                row = {**row, "position": found["p"] if found else 0}
            elif shift:
                await conn.execute(
                    f"UPDATE chunks SET position = position + 1 WHERE {same} AND position >= %s",
                    (*args, row["position"]),
                )
            await conn.execute(
                "INSERT INTO chunks (tenant_id, scope, scope_id, id, document_id, parent_id, position, type, status,"
                " title, body, fields) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                (
                    *t.key,
                    row["id"],
                    row["document_id"],
                    row["parent_id"],
                    row["position"],
                    row["type"],
                    row["status"],
                    row["title"],
                    row["body"],
                    _jsonb(row["fields"]),
                ),
            )
            await self._revision(conn, t, row["id"], 1, row["body"], actor)

    async def update_chunk(
        self, t: Tree, chunk_id: str, revision: int, changes: dict[str, Any], actor: str | None
    ) -> int | None:
        """Apply `changes` (title, type, status, body, fields) if the chunk is still at
        `revision`: the new revision, or None (stale, or no such chunk). A changed body is
        recorded at the new revision."""
        sets = "".join(f", {col} = %s" for col in changes)
        values = tuple(_jsonb(v) if col == "fields" else v for col, v in changes.items())
        async with self.pool.connection() as conn, conn.transaction():
            cur = await conn.execute(
                f"UPDATE chunks SET revision = revision + 1, updated_at = now(){sets}"
                f" WHERE {_T} AND id = %s AND revision = %s RETURNING revision, body",
                (*values, *t.key, chunk_id, revision),
            )
            row = await cur.fetchone()
            if row is None:
                return None
            if "body" in changes:
                await self._revision(conn, t, chunk_id, row["revision"], row["body"], actor)
            return int(row["revision"])

    async def delete_chunk(self, t: Tree, chunk_id: str) -> int:
        """Delete the chunk and its subtree (by foreign key); how many chunks went."""
        async with self.pool.connection() as conn, conn.transaction():
            cur = await conn.execute(
                f"""WITH RECURSIVE sub AS (
                        SELECT id FROM chunks WHERE {_T} AND id = %s
                        UNION SELECT c.id FROM chunks c JOIN sub ON c.parent_id = sub.id
                         WHERE c.tenant_id = %s AND c.scope = %s AND c.scope_id = %s)
                    SELECT count(*) AS n FROM sub""",
                (*t.key, chunk_id, *t.key),
            )
            row = await cur.fetchone()
            await conn.execute(f"DELETE FROM chunks WHERE {_T} AND id = %s", (*t.key, chunk_id))
            return int(row["n"]) if row else 0

    async def is_within(self, t: Tree, chunk_id: str, ancestor: str) -> bool:
        """Whether `ancestor` is `chunk_id` or one of its ancestors."""
        row = await self._one(
            f"""WITH RECURSIVE up AS (
                    SELECT id, parent_id, 0 AS depth FROM chunks WHERE {_T} AND id = %s
                    UNION ALL SELECT c.id, c.parent_id, up.depth + 1 FROM chunks c JOIN up ON c.id = up.parent_id
                     WHERE c.tenant_id = %s AND c.scope = %s AND c.scope_id = %s AND up.depth < 10000)
                SELECT EXISTS (SELECT 1 FROM up WHERE id = %s) AS found""",
            (*t.key, chunk_id, *t.key, ancestor),
        )
        return bool(row and row["found"])

    async def move_chunk(self, t: Tree, chunk_id: str, parent_id: str | None, position: int) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(
                f"UPDATE chunks SET parent_id = %s, position = %s, updated_at = now() WHERE {_T} AND id = %s",
                (parent_id, position, *t.key, chunk_id),
            )

    async def siblings(self, t: Tree, document_id: str, parent_id: str | None) -> list[str]:
        rows = await self._all(
            f"SELECT id FROM chunks WHERE {_T} AND document_id = %s AND parent_id IS NOT DISTINCT"
            f" FROM %s ORDER BY position, id",
            (*t.key, document_id, parent_id),
        )
        return [r["id"] for r in rows]

    async def renumber(self, t: Tree, ids: list[str]) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(
                "UPDATE chunks c SET position = o.n - 1, updated_at = now()"
                " FROM unnest(%s::text[]) WITH ORDINALITY AS o(id, n)"
                " WHERE c.tenant_id = %s AND c.scope = %s AND c.scope_id = %s AND c.id = o.id",
                (ids, *t.key),
            )

    async def query(
        self, t: Tree, filters: dict[str, str], document_ids: list[str] | None, limit: int,
        tag: str | None = None, tag_prefix: str | None = None,
    ) -> list[DictRow]:
        where = "".join(f" AND {_FILTERS[k]}" for k in filters)
        params: tuple[Any, ...] = (*t.key, *filters.values())
        if document_ids is not None:
            where += " AND document_id = ANY(%s)"
            params = (*params, document_ids)
        if tag is not None or tag_prefix is not None:
            where += (" AND id IN (SELECT chunk_id FROM chunk_tags g WHERE g.tenant_id = chunks.tenant_id"
                      " AND g.scope = chunks.scope AND g.scope_id = chunks.scope_id AND (g.tag = %s"
                      " OR (%s::text IS NOT NULL AND (g.tag = %s OR g.tag LIKE %s))))")
            like = None if tag_prefix is None else tag_prefix.replace("\\", "\\\\").replace("%", "\\%").replace(
                "_", "\\_") + "/%"
            params = (*params, tag, tag_prefix, tag_prefix, like)
        return await self._all(
            f"SELECT {CHUNK_COLS} FROM chunks WHERE {_T}{where}"
            f" ORDER BY document_id, parent_id NULLS FIRST, position, id LIMIT %s",
            (*params, limit),
        )

    async def document_chunks(self, t: Tree, document_id: str) -> list[DictRow]:
        """Every chunk of the document with its body, parents' rows before their children's
        order within a parent by position."""
        return await self._all(
            f"SELECT {CHUNK_COLS}, body, fields FROM chunks WHERE {_T} AND document_id = %s"
            f" ORDER BY parent_id NULLS FIRST, position, id",
            (*t.key, document_id),
        )

    # -- edges ----------------------------------------------------------------------------------

    async def link(self, t: Tree, from_id: str, to_id: str, kind: str) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(
                "INSERT INTO chunk_edges (tenant_id, scope, scope_id, from_id, to_id, kind)"
                " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                (*t.key, from_id, to_id, kind),
            )

    async def unlink(self, t: Tree, from_id: str, to_id: str, kind: str) -> bool:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"DELETE FROM chunk_edges WHERE {_T} AND from_id = %s AND to_id = %s AND kind = %s",
                (*t.key, from_id, to_id, kind),
            )
            return cur.rowcount > 0

    async def edges(self, t: Tree, document_id: str, *, outgoing_only: bool = False) -> list[DictRow]:
        """The edges with an endpoint in the document (only those leaving it: `outgoing_only`),
        with both endpoints' title, type, status and document."""
        inside = f"SELECT id FROM chunks WHERE {_T} AND document_id = %s"
        where = f"e.from_id IN ({inside})" + ("" if outgoing_only else f" OR e.to_id IN ({inside})")
        params = (*t.key, document_id) * (1 if outgoing_only else 2)
        return await self._all(
            f"""SELECT e.from_id, e.to_id, e.kind,
                       cf.title AS from_title, cf.type AS from_type, cf.status AS from_status,
                       cf.document_id AS from_document_id, ct.title AS to_title, ct.type AS to_type,
                       ct.status AS to_status, ct.document_id AS to_document_id
                  FROM chunk_edges e
                  JOIN chunks cf ON (cf.tenant_id, cf.scope, cf.scope_id, cf.id) = (e.tenant_id, e.scope, e.scope_id,
                                                                                   e.from_id)
                  JOIN chunks ct ON (ct.tenant_id, ct.scope, ct.scope_id, ct.id) = (e.tenant_id, e.scope, e.scope_id,
                                                                                   e.to_id)
                 WHERE e.tenant_id = %s AND e.scope = %s AND e.scope_id = %s AND ({where})
                 ORDER BY e.kind, e.created_at, e.from_id, e.to_id""",
            (*t.key, *params),
        )

    # -- types ----------------------------------------------------------------------------------

    async def define_type(self, t: Tree, document_id: str, name: str, fields: Any) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(
                "INSERT INTO chunk_types (tenant_id, scope, scope_id, document_id, name, fields)"
                " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (tenant_id, scope, scope_id, document_id, name)"
                " DO UPDATE SET fields = excluded.fields, created_at = now()",
                (*t.key, document_id, name, Jsonb(fields)),
            )

    async def types(self, t: Tree, document_id: str) -> list[DictRow]:
        return await self._all(
            f"SELECT document_id, name, fields FROM chunk_types WHERE {_T} AND document_id = %s ORDER BY name",
            (*t.key, document_id),
        )

    async def type_fields(self, t: Tree, document_id: str, name: str) -> Any:
        """The fields of type `name` for the document (its own definition, else the scope's)."""
        row = await self._one(
            f"SELECT fields FROM chunk_types WHERE {_T} AND name = %s AND document_id IN (%s, '')"
            f" ORDER BY document_id DESC LIMIT 1",
            (*t.key, name, document_id),
        )
        return row["fields"] if row else None

    # -- revisions ------------------------------------------------------------------------------

    async def revisions(self, t: Tree, chunk_id: str, limit: int) -> list[DictRow]:
        return await self._all(
            f"SELECT revision, (extract(epoch FROM created_at) * 1e9)::bigint AS created_at, actor"
            f" FROM chunk_revisions WHERE {_T} AND chunk_id = %s ORDER BY revision DESC LIMIT %s",
            (*t.key, chunk_id, limit),
        )

    async def revision_body(self, t: Tree, chunk_id: str, revision: int) -> str | None:
        row = await self._one(
            f"SELECT body FROM chunk_revisions WHERE {_T} AND chunk_id = %s AND revision = %s",
            (*t.key, chunk_id, revision),
        )
        return None if row is None else str(row["body"])

    @staticmethod
    async def _revision(conn: Any, t: Tree, chunk_id: str, revision: int, body: str, actor: str | None) -> None:
        await conn.execute(
            "INSERT INTO chunk_revisions (tenant_id, scope, scope_id, chunk_id, revision, body, actor)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
            (*t.key, chunk_id, revision, body, actor),
        )

    # -- tags (migration 0087) ------------------------------------------------------------------

    async def set_tags(self, t: Tree, table: str, id_: str, tags: list[str], *, replace: bool,
                       remove: bool = False) -> list[str]:
        """Add (or remove) `tags` on a chunk (`chunk_tags`) or a document (`document_tags`); with
        `replace` the set becomes exactly `tags`. The target's tags after, sorted."""
        col = {"chunk_tags": "chunk_id", "document_tags": "document_id"}[table]
        async with self.pool.connection() as conn:
            if replace:
                await conn.execute(f"DELETE FROM {table} WHERE {_T} AND {col} = %s", (*t.key, id_))
            if remove:
                await conn.execute(f"DELETE FROM {table} WHERE {_T} AND {col} = %s AND tag = ANY(%s)",
                                   (*t.key, id_, tags))
            elif tags:
                await conn.execute(
                    f"INSERT INTO {table} (tenant_id, scope, scope_id, {col}, tag)"
                    f" SELECT %s, %s, %s, %s, unnest(%s::text[]) ON CONFLICT DO NOTHING", (*t.key, id_, tags))
            cur = await conn.execute(f"SELECT tag FROM {table} WHERE {_T} AND {col} = %s ORDER BY tag",
                                     (*t.key, id_))
            return [r["tag"] for r in await cur.fetchall()]

    async def tag_counts(self, t: Tree, *, chunk_id: str | None = None, document_id: str | None = None
                         ) -> list[DictRow]:
        if chunk_id is not None:
            return await self._all(f"SELECT tag, count(*) AS count FROM chunk_tags WHERE {_T} AND chunk_id = %s"
                                   f" GROUP BY tag ORDER BY tag", (*t.key, chunk_id))
        if document_id is not None:
            return await self._all(f"SELECT tag, count(*) AS count FROM document_tags WHERE {_T}"
                                   f" AND document_id = %s GROUP BY tag ORDER BY tag", (*t.key, document_id))
        return await self._all(
            f"SELECT tag, count(*) AS count FROM (SELECT tag FROM chunk_tags WHERE {_T} UNION ALL"
            f" SELECT tag FROM document_tags WHERE {_T}) g GROUP BY tag ORDER BY tag", (*t.key, *t.key))

    # -- discovery ------------------------------------------------------------------------------

    async def backlinks(self, t: Tree, chunk_id: str) -> list[DictRow]:
        """Every edge pointing at the chunk, with its source chunk's title, type, status, document."""
        return await self._all(
            "SELECT e.from_id, e.kind, c.title AS from_title, c.type AS from_type, c.status AS from_status,"
            " c.document_id AS from_document_id FROM chunk_edges e JOIN chunks c ON c.tenant_id = e.tenant_id"
            " AND c.scope = e.scope AND c.scope_id = e.scope_id AND c.id = e.from_id"
            " WHERE e.tenant_id = %s AND e.scope = %s AND e.scope_id = %s AND e.to_id = %s"
            " ORDER BY e.kind, e.created_at, e.from_id", (*t.key, chunk_id))

    async def query_documents(self, t: Tree, *, type_: str | None, status: str | None, tag: str | None,
                              document_ids: list[str] | None, limit: int) -> list[DictRow]:
        """The scope's documents (loomcycle's query_documents: by title), with their chunk counts."""
        where, params = "", list[Any]([*t.key])
        for col, value in (("type", type_), ("status", status)):
            if value is not None:
                where += f" AND d.{col} = %s"
                params.append(value)
        if tag is not None:
            where += (" AND d.id IN (SELECT document_id FROM document_tags g WHERE g.tenant_id = d.tenant_id"
                      " AND g.scope = d.scope AND g.scope_id = d.scope_id AND g.tag = %s)")
            params.append(tag)
        if document_ids is not None:
            where += " AND d.id = ANY(%s)"
            params.append(document_ids)
        return await self._all(
            f"SELECT d.id, d.title, d.type, d.status, d.root_chunk_id, d.created_at, d.updated_at,"
            f" (SELECT count(*) FROM chunks c WHERE c.tenant_id = d.tenant_id AND c.scope = d.scope"
            f"  AND c.scope_id = d.scope_id AND c.document_id = d.id) AS chunks"
            f" FROM documents d WHERE d.tenant_id = %s AND d.scope = %s AND d.scope_id = %s{where}"
            f" ORDER BY d.title, d.id LIMIT %s", (*params, limit))

    # -- body embeddings (chunk_embeddings: only where pgvector is) --------------------------------

    async def set_embedding(self, t: Tree, chunk_id: str, embedder: str, model: str, vector: list[float]) -> None:
        text = "[" + ",".join(format(float(x), ".9g") for x in vector) + "]"
        async with self.pool.connection() as conn:
            await conn.execute(
                "INSERT INTO chunk_embeddings (tenant_id, scope, scope_id, chunk_id, embedder, model, dimension,"
                " embedding) VALUES (%s, %s, %s, %s, %s, %s, %s, %s::vector)"
                " ON CONFLICT (tenant_id, scope, scope_id, chunk_id) DO UPDATE SET embedder = excluded.embedder,"
                " model = excluded.model, dimension = excluded.dimension, embedding = excluded.embedding,"
                " created_at = now()",
                (*t.key, chunk_id, embedder, model, len(vector), text))

    async def drop_embedding(self, t: Tree, chunk_id: str) -> None:
        async with self.pool.connection() as conn:
            cur = await conn.execute("SELECT to_regclass('chunk_embeddings') IS NOT NULL AS present")
            row = await cur.fetchone()
            if row and row["present"]:
                await conn.execute(f"DELETE FROM chunk_embeddings WHERE {_T} AND chunk_id = %s", (*t.key, chunk_id))
