"""Usage and cost as recorded: the per-day roll-up the `usage` events feed (written by the
statement that appends them, `ROLLUP_CTE`: exact, a crashed step's events and their roll-up vanish
together), the operator's price table, and the report over them.

A report groups by any of the whitelisted dimensions (the whitelist is the SQL-injection guard: a
caller's `group_by` only ever names one of these columns) and never sums across currencies."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from psycopg import sql
from psycopg.types.json import Jsonb

from treadle.domain.events import EventType
from treadle.domain.runs import NewEvent
from treadle.store.db import Pool

#: report dimension → usage_daily column (loomcycle's names, plus agent, def and day)
DIMENSIONS: dict[str, str] = {
    "tenant": "tenant_id", "user": "user_id", "agent": "agent", "def": "def_id",
    "provider": "provider", "model": "model", "day": "day",
}
TOTALS = ("calls", "input_tokens", "output_tokens", "cache_creation_tokens", "cache_read_tokens", "cost",
          "unpriced_calls")


#: the `usage` events' token counts → (roll-up parameter, usage_daily column)
_COUNTS = (("input_tokens", "i"), ("output_tokens", "o"), ("cache_creation_input_tokens", "cw"),
           ("cache_read_input_tokens", "cr"))

#: A CTE of a statement that appends a run's events (the step commit, a mid-step append) whose
#: first CTE `g` returns the run's `tenant_id`: the events' model calls added to the day's row of
#: the run's tenant, user, agent, AgentDef, provider, model and currency, priced from
#: `usage_prices` (a call without a price counts in `unpriced_calls`, cost 0). It was a row
#: trigger on `events` (migration 0045) until migration 0080: a PL/pgSQL call with its own search
#: path and three statements per model call, ~0.2 ms of the server's CPU per iteration.
ROLLUP_CTE = (
    ", ug AS (INSERT INTO usage_daily AS d (tenant_id, day, user_id, agent, def_id, provider, model, currency,"
    " calls, input_tokens, output_tokens, cache_creation_tokens, cache_read_tokens, cost, unpriced_calls, shard)"
    " SELECT g.tenant_id, (now() AT TIME ZONE 'UTC')::date, %(u_user)s, %(u_agent)s, %(u_def)s, u.provider,"
    " u.model, coalesce(p.currency, ''), u.calls, u.i, u.o, u.cw, u.cr,"
    " CASE WHEN p.provider IS NULL THEN 0"
    " ELSE (u.i * p.input + u.o * p.output + u.cw * p.cache_write + u.cr * p.cache_read) / 1e6 END,"
    " CASE WHEN p.provider IS NULL THEN u.calls ELSE 0 END, abs(hashtext(%(run_id)s)) %% 16"
    " FROM g, jsonb_to_recordset(%(u_rows)s::jsonb)"
    " AS u(provider text, model text, calls bigint, i bigint, o bigint, cw bigint, cr bigint)"
    " LEFT JOIN usage_prices p ON p.provider = u.provider AND p.model = u.model"
    " ON CONFLICT (tenant_id, day, user_id, agent, def_id, provider, model, currency, shard) DO UPDATE SET"
    " calls = d.calls + EXCLUDED.calls, input_tokens = d.input_tokens + EXCLUDED.input_tokens,"
    " output_tokens = d.output_tokens + EXCLUDED.output_tokens,"
    " cache_creation_tokens = d.cache_creation_tokens + EXCLUDED.cache_creation_tokens,"
    " cache_read_tokens = d.cache_read_tokens + EXCLUDED.cache_read_tokens,"
    " cost = d.cost + EXCLUDED.cost, unpriced_calls = d.unpriced_calls + EXCLUDED.unpriced_calls)"
)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def rollup_rows(events: Sequence[NewEvent]) -> list[dict[str, Any]]:
    """The `usage` events among `events`, one row per (provider, model) — ROLLUP_CTE's `u_rows`
    (an upsert may touch a row once per statement, so two calls of one model are summed here)."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for e in events:
        if e.type != EventType.USAGE:
            continue
        u = e.payload.get("usage")
        u = u if isinstance(u, dict) else {}
        key = (str(u.get("provider") or ""), str(u.get("model") or ""))
        row = rows.setdefault(key, {"provider": key[0], "model": key[1], "calls": 0, "i": 0, "o": 0, "cw": 0,
                                    "cr": 0})
        row["calls"] += 1
        for name, col in _COUNTS:
            row[col] += _count(u.get(name))
    return list(rows.values())


def rollup_params(user_id: str | None, agent: str, def_id: str | None, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """ROLLUP_CTE's parameters for a run's `rows` (`rollup_rows`; its `run_id` is the statement's)."""
    return {"u_user": user_id or "", "u_agent": agent, "u_def": def_id or "", "u_rows": Jsonb(rows)}


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
