"""A tenant's data as a whole: export (every row of every tenant-scoped table) and erase.

The tables are found in the catalogue (every table of this schema with a `tenant_id` column), so
a table a later migration adds is covered without a change here. Token hashes and sealed
credentials are never exported."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from psycopg import sql

from treadle.store.db import Pool

#: never exported (secrets, even hashed or sealed)
NOT_EXPORTED = frozenset({"auth_tokens", "run_credentials", "credential_defs"})
#: erased first, so their cascades take the rows that hang off runs
ERASE_FIRST = ("runs",)


class TenantData:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def tables(self) -> list[str]:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT c.table_name FROM information_schema.columns c JOIN information_schema.tables t"
                " ON t.table_schema = c.table_schema AND t.table_name = c.table_name"
                " WHERE c.table_schema = current_schema() AND c.column_name = 'tenant_id'"
                " AND t.table_type = 'BASE TABLE' ORDER BY c.table_name"
            )
            return [r["table_name"] for r in await cur.fetchall()]

    async def export(self, tenant_id: str) -> AsyncIterator[dict[str, Any]]:
        """`{"table", "row"}` for every row of the tenant (read in one snapshot)."""
        tables = [t for t in await self.tables() if t not in NOT_EXPORTED]
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            for table in tables:
                query = sql.SQL("SELECT row_to_json(x) AS row FROM {} x WHERE tenant_id = %s").format(
                    sql.Identifier(table))
                async with conn.cursor() as cur:
                    await cur.execute(query, (tenant_id,))
                    async for r in cur:
                        yield {"table": table, "row": r["row"]}

    async def erase(self, tenant_id: str) -> dict[str, int]:
        """Delete every row of the tenant in one transaction; rows deleted per table."""
        tables = await self.tables()
        ordered = [t for t in ERASE_FIRST if t in tables] + [t for t in tables if t not in ERASE_FIRST]
        counts: dict[str, int] = {}
        async with self.pool.connection() as conn, conn.transaction():
            for table in ordered:
                cur = await conn.execute(
                    sql.SQL("DELETE FROM {} WHERE tenant_id = %s").format(sql.Identifier(table)), (tenant_id,))
                if cur.rowcount:
                    counts[table] = cur.rowcount
        return counts
