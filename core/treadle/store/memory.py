"""Memory rows: tenant/scope/scope_id/key → JSON value, optional expiry."""

from __future__ import annotations

from typing import Any

from psycopg.types.json import Jsonb

from treadle.store.db import Pool

_LIVE = "(expires_at IS NULL OR expires_at > now())"


class MemoryStore:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def set(
        self, tenant: str, scope: str, scope_id: str, key: str, value: Any, ttl_s: float | None
    ) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(
                """INSERT INTO memory (tenant_id, scope, scope_id, key, value, expires_at)
                   VALUES (%s, %s, %s, %s, %s,
                           CASE WHEN %s::float8 IS NULL THEN NULL ELSE now() + make_interval(secs => %s) END)
                   ON CONFLICT (tenant_id, scope, scope_id, key) DO UPDATE
                   SET value = excluded.value, expires_at = excluded.expires_at, updated_at = now()""",
                (tenant, scope, scope_id, key, Jsonb(value), ttl_s, ttl_s),
            )

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
        like = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
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
            cur = await conn.execute(
                """INSERT INTO memory AS m (tenant_id, scope, scope_id, key, value, expires_at)
                   VALUES (%(t)s, %(s)s, %(i)s, %(k)s, to_jsonb(%(d)s::bigint),
                           CASE WHEN %(ttl)s::float8 IS NULL THEN NULL
                                ELSE now() + make_interval(secs => %(ttl)s) END)
                   ON CONFLICT (tenant_id, scope, scope_id, key) DO UPDATE SET
                     value = CASE
                        WHEN m.expires_at IS NOT NULL AND m.expires_at <= now() THEN excluded.value
                        WHEN jsonb_typeof(m.value) = 'number' AND (m.value #>> '{}') ~ '^-?[0-9]+$'
                          THEN to_jsonb((m.value #>> '{}')::bigint + %(d)s::bigint)
                        ELSE m.value END,
                     expires_at = CASE WHEN %(ttl)s::float8 IS NULL AND (m.expires_at IS NULL
                                                                     OR m.expires_at > now())
                                       THEN m.expires_at ELSE excluded.expires_at END,
                     updated_at = now()
                   RETURNING value""",
                {"t": tenant, "s": scope, "i": scope_id, "k": key, "d": delta, "ttl": ttl_s},
            )
            row = await cur.fetchone()
        value = row["value"] if row else None
        return value if isinstance(value, int) and not isinstance(value, bool) else None
