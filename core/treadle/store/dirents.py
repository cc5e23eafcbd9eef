"""Dirents: the Path tree's rows (migration 0085) — (tenant, scope, scope_id, parent_path, name)
→ (kind, resource_ref). Paths arrive canonical (knowledge/pathtree.py); `parent_path` always
ends in "/". A prefix ("/docs/") selects a directory's whole subtree: its children have that
parent_path, deeper descendants a parent_path that starts with it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from treadle.store.db import Pool

_COLS = "parent_path, name, kind, resource_ref, created_at, updated_at"
_TREE = "tenant_id = %s AND scope = %s AND scope_id = %s"
_UNDER = f"{_TREE} AND starts_with(parent_path, %s)"


@dataclass(frozen=True, slots=True)
class Tree:
    """One scope's tree: the tenant, `agent`/`user`/`tenant`, and the agent's name, the user's
    id, or '' (tenant)."""

    tenant_id: str
    scope: str
    scope_id: str

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.tenant_id, self.scope, self.scope_id)


@dataclass(frozen=True, slots=True)
class Dirent:
    parent_path: str
    name: str
    kind: str
    resource_ref: dict[str, Any]
    created_at: datetime
    updated_at: datetime

    @property
    def full_path(self) -> str:
        return self.parent_path + self.name


class DirentStore:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def get(self, tree: Tree, parent: str, name: str) -> Dirent | None:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"SELECT {_COLS} FROM dirents WHERE {_TREE} AND parent_path = %s AND name = %s",
                (*tree.key, parent, name),
            )
            row = await cur.fetchone()
        return Dirent(**row) if row else None

    async def under(self, tree: Tree, prefix: str) -> list[Dirent]:
        """Every dirent below the directory whose children sit at `prefix` ("/" for the root)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"SELECT {_COLS} FROM dirents WHERE {_UNDER} ORDER BY parent_path, name", (*tree.key, prefix)
            )
            return [Dirent(**r) for r in await cur.fetchall()]

    async def put(self, tree: Tree, parent: str, name: str, kind: str, ref: dict[str, Any]) -> None:
        """Create the dirent, or repoint an existing one (loomcycle's upsert)."""
        async with self.pool.connection() as conn:
            await conn.execute(
                """INSERT INTO dirents (tenant_id, scope, scope_id, parent_path, name, kind, resource_ref)
                   VALUES (%s, %s, %s, %s, %s, %s, %s)
                   ON CONFLICT (tenant_id, scope, scope_id, parent_path, name) DO UPDATE
                   SET kind = excluded.kind, resource_ref = excluded.resource_ref, updated_at = now()""",
                (*tree.key, parent, name, kind, Jsonb(ref)),
            )

    async def delete(self, tree: Tree, parent: str, name: str) -> bool:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"DELETE FROM dirents WHERE {_TREE} AND parent_path = %s AND name = %s", (*tree.key, parent, name)
            )
            return cur.rowcount > 0

    async def delete_under(self, tree: Tree, prefix: str) -> int:
        async with self.pool.connection() as conn:
            cur = await conn.execute(f"DELETE FROM dirents WHERE {_UNDER}", (*tree.key, prefix))
            return cur.rowcount

    async def delete_pointing_at(self, tree: Tree, kind: str, ref: dict[str, Any]) -> int:
        """Drop the names of one resource (e.g. a deleted document's): dirents of `kind` whose
        resource_ref contains `ref`."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"DELETE FROM dirents WHERE {_TREE} AND kind = %s AND resource_ref @> %s", (*tree.key, kind, Jsonb(ref))
            )
            return cur.rowcount

    async def move(self, tree: Tree, src: tuple[str, str], dst: tuple[str, str]) -> bool:
        """Rename (parent, name) `src` to `dst` and re-parent its whole subtree, in one
        transaction; False when `src` neither exists nor has descendants (a directory its
        descendants imply moves too). The caller has checked that `dst` is free and not inside
        `src`."""
        src_full, dst_full = "".join(src) + "/", "".join(dst) + "/"
        async with self.pool.connection() as conn, conn.transaction():
            cur = await conn.execute(
                f"UPDATE dirents SET parent_path = %s, name = %s, updated_at = now()"
                f" WHERE {_TREE} AND parent_path = %s AND name = %s",
                (*dst, *tree.key, *src),
            )
            moved = cur.rowcount
            cur = await conn.execute(
                f"UPDATE dirents SET parent_path = %s || substr(parent_path, %s), updated_at = now() WHERE {_UNDER}",
                (dst_full, len(src_full) + 1, *tree.key, src_full),
            )
            return bool(moved + cur.rowcount)
