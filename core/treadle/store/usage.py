"""Usage and cost as recorded: the per-day roll-up the `usage` events feed (migration 0045, a
trigger in the step's own transaction), the operator's price table, and the report over them.

A report groups by any of the whitelisted dimensions (the whitelist is the SQL-injection guard: a
caller's `group_by` only ever names one of these columns) and never sums across currencies."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from psycopg import sql

from treadle.store.db import Pool

#: report dimension → usage_daily column (loomcycle's names, plus agent, def and day)
DIMENSIONS: dict[str, str] = {
    "tenant": "tenant_id", "user": "user_id", "agent": "agent", "def": "def_id",
    "provider": "provider", "model": "model", "day": "day",
}
TOTALS = ("calls", "input_tokens", "output_tokens", "cache_creation_tokens", "cache_read_tokens", "cost",
          "unpriced_calls")


class UsageStore:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def set_prices(self, rows: Sequence[tuple[str, str, float, float, float, float, str]]) -> None:
        """The operator's table, as configured now (rows not in it are removed)."""
        async with self.pool.connection() as conn, conn.transaction():
            cur = await conn.execute("SELECT provider, model, input, output, cache_write, cache_read, currency"
                                     " FROM usage_prices")
            have = {tuple(r.values()) for r in await cur.fetchall()}
            if have == set(rows):
                return  # every process opens with the same table: no write, no lock
            await conn.execute("DELETE FROM usage_prices")
            async with conn.cursor() as c:
                await c.executemany("INSERT INTO usage_prices (provider, model, input, output, cache_write,"
                                    " cache_read, currency) VALUES (%s, %s, %s, %s, %s, %s, %s)", list(rows))

    async def report(self, *, tenant_id: str | None, group_by: Sequence[str], since: dt.date | None = None,
                     until: dt.date | None = None, filters: dict[str, str] | None = None) -> list[dict[str, Any]]:
        """Rows of totals grouped by `group_by` (plus currency), `since`/`until` inclusive UTC days."""
        cols = [DIMENSIONS[d] for d in group_by]
        where: list[sql.Composable] = []
        params: list[Any] = []
        if tenant_id is not None:
            where.append(sql.SQL("tenant_id = %s"))
            params.append(tenant_id)
        if since is not None:
            where.append(sql.SQL("day >= %s"))
            params.append(since)
        if until is not None:
            where.append(sql.SQL("day <= %s"))
            params.append(until)
        for dim, value in (filters or {}).items():
            where.append(sql.SQL("{} = %s").format(sql.Identifier(DIMENSIONS[dim])))
            params.append(value)
        keys = [*cols, "currency"]
        query = sql.SQL("SELECT {keys}, {sums} FROM usage_daily {where} GROUP BY {keys} ORDER BY {keys}").format(
            keys=sql.SQL(", ").join(map(sql.Identifier, keys)),
            sums=sql.SQL(", ").join(sql.SQL("sum({c})::{t} AS {c}").format(
                c=sql.Identifier(c), t=sql.SQL("float8" if c == "cost" else "bigint")) for c in TOTALS),
            where=sql.SQL("WHERE ") + sql.SQL(" AND ").join(where) if where else sql.SQL(""),
        )
        async with self.pool.connection() as conn:
            cur = await conn.execute(query, params)
            rows = await cur.fetchall()
        out = []
        for r in rows:
            row = dict(r)
            if isinstance(row.get("day"), dt.date):
                row["day"] = row["day"].isoformat()
            out.append(row)
        return out
