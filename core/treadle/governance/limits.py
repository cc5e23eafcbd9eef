"""Budgets as stored (store migration 0060 `token_limits`) and the usage each limit has counted in its
window, summed from usage_daily (0045) in one statement — the input of the pure decision
(governance/budgets.py).

The engine asks at every iteration boundary; a tenant with no limit costs it nothing but a look
at `tenants_with_limits`, a set this process re-reads at most once per `refresh_s` (and at once
after its own writes). So a limit put through another process binds that process's runs within
`refresh_s`; usage itself is never cached — each check reads what the committed steps rolled up."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

from treadle.governance.budgets import Limit, Verdict, applicable, check, window_start
from treadle.store.db import Pool

_COLUMNS = 'l.tenant_id, l.scope, l.scope_id, l."window", l.metric, l.currency, l.soft_limit, l.hard_limit'
#: each limit's usage in its window: tokens (loomcycle's sum of the four counts) or cost in its currency
_USED = """
    LEFT JOIN LATERAL (
        SELECT sum(CASE WHEN l.metric = 'tokens'
                        THEN d.input_tokens + d.output_tokens + d.cache_creation_tokens + d.cache_read_tokens
                        ELSE d.cost END)::float8 AS used
          FROM usage_daily d
         WHERE d.tenant_id = l.tenant_id
           AND d.day >= CASE WHEN l."window" = 'day' THEN %(today)s::date ELSE %(month)s::date END
           AND (l.scope = 'tenant' OR (l.scope = 'user' AND d.user_id = l.scope_id)
                OR (l.scope = 'agent' AND d.agent = l.scope_id))
           AND (l.metric = 'tokens' OR d.currency = l.currency)) u ON true"""


def _limit(row: dict[str, Any]) -> Limit:
    return Limit(row["tenant_id"], row["scope"], row["scope_id"], row["soft_limit"], row["hard_limit"],
                 row["window"], row["metric"], row["currency"])


class LimitStore:
    def __init__(self, pool: Pool, *, refresh_s: float = 1.0) -> None:
        self.pool = pool
        self.refresh_s = refresh_s
        self._tenants: frozenset[str] = frozenset()
        self._read_at = float("-inf")

    def _window_params(self, now: dt.datetime | None) -> dict[str, Any]:
        now = now or dt.datetime.now(dt.UTC)
        return {"today": window_start("day", now), "month": window_start("month", now)}

    async def list(self, tenant_id: str | None, *, now: dt.datetime | None = None) -> list[dict[str, Any]]:
        """Every limit of `tenant_id` (None: of every tenant) with its window's usage (`used`)."""
        query = (f"SELECT {_COLUMNS}, l.updated_at, l.updated_by, coalesce(u.used, 0) AS used"
                 f" FROM token_limits l {_USED}"
                 " WHERE %(tenant)s::text IS NULL OR l.tenant_id = %(tenant)s"
                 ' ORDER BY l.tenant_id, l.scope, l.scope_id, l."window", l.metric')
        async with self.pool.connection() as conn:
            cur = await conn.execute(query, {"tenant": tenant_id, **self._window_params(now)})
            return [dict(r) for r in await cur.fetchall()]

    async def put(self, limit: Limit, *, updated_by: str) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(
                'INSERT INTO token_limits (tenant_id, scope, scope_id, "window", metric, currency, soft_limit,'
                " hard_limit, updated_at, updated_by) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, now(), %s)"
                ' ON CONFLICT (tenant_id, scope, scope_id, "window", metric) DO UPDATE SET'
                " currency = EXCLUDED.currency, soft_limit = EXCLUDED.soft_limit,"
                " hard_limit = EXCLUDED.hard_limit, updated_at = now(), updated_by = EXCLUDED.updated_by",
                (limit.tenant_id, limit.scope, limit.scope_id, limit.window, limit.metric, limit.currency,
                 limit.soft_limit, limit.hard_limit, updated_by),
            )
        self._read_at = float("-inf")

    async def delete(self, tenant_id: str, scope: str, scope_id: str, window: str, metric: str) -> bool:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                'DELETE FROM token_limits WHERE tenant_id = %s AND scope = %s AND scope_id = %s AND "window" = %s'
                " AND metric = %s", (tenant_id, scope, scope_id, window, metric))
            gone = cur.rowcount > 0
        self._read_at = float("-inf")
        return gone

    async def tenants_with_limits(self) -> frozenset[str]:
        """The tenants that have any limit (re-read at most once per `refresh_s`)."""
        if time.monotonic() - self._read_at >= self.refresh_s:
            async with self.pool.connection() as conn:
                cur = await conn.execute("SELECT t AS tenant_id FROM treadle_limited_tenants() t")
                self._tenants = frozenset(r["tenant_id"] for r in await cur.fetchall())
            self._read_at = time.monotonic()
        return self._tenants

    async def verdict(self, tenant_id: str, user_id: str | None, agent: str, *,
                      now: dt.datetime | None = None) -> Verdict | None:
        """The decision for a run of `agent` for `user_id` now; None when no limit binds it."""
        if tenant_id not in await self.tenants_with_limits():
            return None
        query = (f"SELECT {_COLUMNS}, coalesce(u.used, 0) AS used FROM token_limits l {_USED}"
                 " WHERE l.tenant_id = %(tenant)s AND (l.scope = 'tenant'"
                 " OR (l.scope = 'user' AND l.scope_id = %(user)s) OR (l.scope = 'agent' AND l.scope_id = %(agent)s))"
                 ' ORDER BY l.scope, l.scope_id, l."window", l.metric')
        async with self.pool.connection() as conn:
            cur = await conn.execute(query, {"tenant": tenant_id, "user": user_id or "", "agent": agent,
                                             **self._window_params(now)})
            rows = await cur.fetchall()
        if not rows:
            return None
        limits = applicable([_limit(r) for r in rows], tenant_id=tenant_id, user_id=user_id, agent=agent)
        used = {_limit(r): float(r["used"]) for r in rows}
        return check(limits, used)
