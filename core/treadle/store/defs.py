"""Versioned, content-addressed definitions of every kind, tenant-scoped.

A (tenant, kind, name) has versions 1, 2, … (immutable rows) and at most one active version
(`def_active`). Creating takes the next version under a transaction advisory lock; `fork` is a
create with `parent_def_id` (lineage); `retire` marks a version retired and drops it from the
active pointer; `promote` points the name at a version. Kind-specific rules (what is hashed,
what a fork may change, who may call it) belong to the feature that owns the kind.
"""

from __future__ import annotations

import builtins
import secrets
from typing import Any

from psycopg.types.json import Jsonb

from treadle.domain.defs import DefRecord
from treadle.errors import Conflict, NotFound
from treadle.store.db import Pool

_COLUMNS = (
    "d.def_id, d.tenant_id, d.kind, d.name, d.version, d.content_sha256, d.body, d.parent_def_id,"
    " d.status, d.description, d.created_by_run_id, d.created_at, d.retired_at,"
    " (a.def_id IS NOT NULL) AS active, d.treadle_sha256"
)
_FROM = "defs d LEFT JOIN def_active a ON a.def_id = d.def_id"


def new_def_id() -> str:
    return "def_" + secrets.token_hex(8)


def _record(row: dict[str, Any]) -> DefRecord:
    return DefRecord(**row)


class DefStore:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def create(
        self,
        tenant_id: str,
        kind: str,
        name: str,
        body: dict[str, Any],
        content_sha256: str,
        *,
        parent_def_id: str | None = None,
        description: str = "",
        promote: bool = True,
        created_by_run_id: str | None = None,
        treadle_sha256: str | None = None,
    ) -> DefRecord:
        """Insert the next version of (tenant, kind, name); with `promote` it becomes active."""
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"defs\x1f{tenant_id}\x1f{kind}\x1f{name}",)
            )
            if parent_def_id is not None:
                cur = await conn.execute(
                    "SELECT 1 FROM defs WHERE def_id = %s AND tenant_id = %s AND kind = %s",
                    (parent_def_id, tenant_id, kind),
                )
                if await cur.fetchone() is None:
                    raise NotFound(f"parent def {parent_def_id!r} not found")
            def_id = new_def_id()
            await conn.execute(
                """INSERT INTO defs (def_id, tenant_id, kind, name, version, content_sha256, body,
                                     parent_def_id, description, created_by_run_id, treadle_sha256)
                   SELECT %s, %s, %s, %s, coalesce(max(version), 0) + 1, %s, %s, %s, %s, %s, %s
                   FROM defs WHERE tenant_id = %s AND kind = %s AND name = %s""",
                (
                    def_id, tenant_id, kind, name, content_sha256, Jsonb(body), parent_def_id, description,
                    created_by_run_id, treadle_sha256, tenant_id, kind, name,
                ),
            )
            if promote:
                await self._point(conn, tenant_id, kind, name, def_id)
        record = await self.get(tenant_id, kind, def_id=def_id)
        assert record is not None
        return record

    async def get(
        self,
        tenant_id: str,
        kind: str,
        *,
        def_id: str | None = None,
        name: str | None = None,
        version: int | None = None,
    ) -> DefRecord | None:
        """By def_id; or by name and version; or by name alone → the active version."""
        params: list[Any]
        if def_id is not None:
            where, params = "d.def_id = %s", [def_id]
        elif name is not None and version is not None:
            where, params = "d.name = %s AND d.version = %s", [name, version]
        elif name is not None:
            where, params = "a.def_id IS NOT NULL AND d.name = %s", [name]
        else:
            raise ValueError("get needs def_id or name")
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"SELECT {_COLUMNS} FROM {_FROM} WHERE d.tenant_id = %s AND d.kind = %s AND {where}",
                (tenant_id, kind, *params),
            )
            row = await cur.fetchone()
        return _record(row) if row else None

    async def list(
        self, tenant_id: str, kind: str, *, name: str | None = None, include_retired: bool = False, limit: int = 200
    ) -> builtins.list[DefRecord]:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"SELECT {_COLUMNS} FROM {_FROM} WHERE d.tenant_id = %s AND d.kind = %s"
                " AND (%s::text IS NULL OR d.name = %s) AND (%s OR d.status = 'active')"
                " ORDER BY d.name, d.version DESC LIMIT %s",
                (tenant_id, kind, name, name, include_retired, limit),
            )
            rows = await cur.fetchall()
        return [_record(r) for r in rows]

    async def active_versions(self, tenant_id: str, kind: str) -> dict[str, tuple[str, str]]:
        """name → (def_id, description) of every active version of a kind (no bodies: cheap for a
        library of any size — the Skill tool's catalogue and a run's skill pins)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT d.name, d.def_id, coalesce(d.body->>'description', '') AS description"
                " FROM def_active a JOIN defs d ON d.def_id = a.def_id"
                " WHERE d.tenant_id = %s AND d.kind = %s",
                (tenant_id, kind),
            )
            rows = await cur.fetchall()
        return {r["name"]: (r["def_id"], r["description"]) for r in rows}

    async def children(self, tenant_id: str, kind: str, def_ids: builtins.list[str]) -> builtins.list[DefRecord]:
        """The defs whose parent is one of `def_ids`, oldest first."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"SELECT {_COLUMNS} FROM defs d LEFT JOIN def_active a ON a.def_id = d.def_id"
                " WHERE d.tenant_id = %s AND d.kind = %s AND d.parent_def_id = ANY(%s)"
                " ORDER BY d.created_at, d.def_id", (tenant_id, kind, def_ids))
            return [_record(r) for r in await cur.fetchall()]

    async def lineage(
        self, tenant_id: str, kind: str, def_id: str, max_depth: int = 100
    ) -> builtins.list[DefRecord]:
        """The def and its ancestors, newest first."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"""WITH RECURSIVE chain(def_id, depth) AS (
                        SELECT def_id, 0 FROM defs WHERE def_id = %s AND tenant_id = %s AND kind = %s
                        UNION ALL
                        SELECT p.parent_def_id, c.depth + 1 FROM chain c JOIN defs p ON p.def_id = c.def_id
                        WHERE p.parent_def_id IS NOT NULL AND c.depth < %s)
                    SELECT {_COLUMNS} FROM chain JOIN defs d ON d.def_id = chain.def_id
                    LEFT JOIN def_active a ON a.def_id = d.def_id ORDER BY chain.depth""",
                (def_id, tenant_id, kind, max_depth),
            )
            rows = await cur.fetchall()
        return [_record(r) for r in rows]

    async def promote(self, tenant_id: str, kind: str, def_id: str) -> DefRecord:
        async with self.pool.connection() as conn, conn.transaction():
            cur = await conn.execute(
                "SELECT name, status FROM defs WHERE def_id = %s AND tenant_id = %s AND kind = %s FOR UPDATE",
                (def_id, tenant_id, kind),
            )
            row = await cur.fetchone()
            if row is None:
                raise NotFound(f"def {def_id!r} not found")
            if row["status"] != "active":
                raise Conflict(f"def {def_id!r} is retired and cannot be promoted")
            await self._point(conn, tenant_id, kind, row["name"], def_id)
        record = await self.get(tenant_id, kind, def_id=def_id)
        assert record is not None
        return record

    async def retire(self, tenant_id: str, kind: str, def_id: str) -> DefRecord:
        async with self.pool.connection() as conn, conn.transaction():
            cur = await conn.execute(
                "UPDATE defs SET status = 'retired', retired_at = coalesce(retired_at, now())"
                " WHERE def_id = %s AND tenant_id = %s AND kind = %s RETURNING name",
                (def_id, tenant_id, kind),
            )
            if await cur.fetchone() is None:
                raise NotFound(f"def {def_id!r} not found")
            await conn.execute("DELETE FROM def_active WHERE def_id = %s", (def_id,))
        record = await self.get(tenant_id, kind, def_id=def_id)
        assert record is not None
        return record

    async def legacy_hashed(self, kind: str) -> builtins.list[DefRecord]:
        """Rows of `kind` (every tenant) still carrying treadle's earlier hash as content_sha256
        (written before migration 0018); `rehash` gives them loomcycle's."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"SELECT {_COLUMNS} FROM {_FROM} WHERE d.kind = %s AND d.content_sha256 = d.treadle_sha256", (kind,)
            )
            return [_record(r) for r in await cur.fetchall()]

    async def rehash(self, def_id: str, content_sha256: str) -> None:
        async with self.pool.connection() as conn:
            await conn.execute("UPDATE defs SET content_sha256 = %s WHERE def_id = %s", (content_sha256, def_id))

    @staticmethod
    async def _point(conn: Any, tenant_id: str, kind: str, name: str, def_id: str) -> None:
        await conn.execute(
            """INSERT INTO def_active (tenant_id, kind, name, def_id) VALUES (%s, %s, %s, %s)
               ON CONFLICT (tenant_id, kind, name) DO UPDATE SET def_id = excluded.def_id, promoted_at = now()""",
            (tenant_id, kind, name, def_id),
        )
