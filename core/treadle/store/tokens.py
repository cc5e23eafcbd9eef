"""What authentication reads: one row per operator-token hash (see migration 0020)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from treadle.store.db import Pool

_VALID = "(expires_at IS NULL OR expires_at > now())"


@dataclass(frozen=True, slots=True)
class TokenRow:
    token_hash: str
    def_id: str
    tenant_id: str
    name: str
    subject: str
    scopes: tuple[str, ...]
    created_at: datetime
    expires_at: datetime | None


def _row(r: dict[str, Any]) -> TokenRow:
    return TokenRow(**{**r, "scopes": tuple(r["scopes"])})


class AuthTokenStore:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def add(self, row: TokenRow) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(
                "INSERT INTO auth_tokens (token_hash, def_id, tenant_id, name, subject, scopes, expires_at)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (token_hash) DO NOTHING",
                (row.token_hash, row.def_id, row.tenant_id, row.name, row.subject, Jsonb(list(row.scopes)),
                 row.expires_at),
            )

    async def lookup(self, token_hash: str) -> TokenRow | None:
        """The valid token with this hash, if any."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(f"SELECT * FROM auth_tokens WHERE token_hash = %s AND {_VALID}", (token_hash,))
            row = await cur.fetchone()
        return _row(row) if row else None

    async def expire(self, def_id: str, *, after_seconds: float = 0.0) -> datetime | None:
        """Make the version's token invalid `after_seconds` from now (never later than it already
        expires); answers when it expires."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "UPDATE auth_tokens SET expires_at = LEAST(COALESCE(expires_at, 'infinity'),"
                " now() + make_interval(secs => %s)) WHERE def_id = %s RETURNING expires_at",
                (after_seconds, def_id),
            )
            row = await cur.fetchone()
        return row["expires_at"] if row else None

    async def of_def(self, def_id: str) -> TokenRow | None:
        async with self.pool.connection() as conn:
            cur = await conn.execute("SELECT * FROM auth_tokens WHERE def_id = %s", (def_id,))
            row = await cur.fetchone()
        return _row(row) if row else None

    async def any_valid(self) -> bool:
        async with self.pool.connection() as conn:
            cur = await conn.execute(f"SELECT EXISTS (SELECT 1 FROM auth_tokens WHERE {_VALID}) AS any")
            row = await cur.fetchone()
        return bool(row and row["any"])

    async def any_valid_admin(self) -> bool:
        """Whether some valid token holds `substrate:admin` (it turns the legacy token off)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"SELECT EXISTS (SELECT 1 FROM auth_tokens WHERE {_VALID} AND scopes ? 'substrate:admin') AS any"
            )
            row = await cur.fetchone()
        return bool(row and row["any"])
