"""Webhook deliveries (the accepted ones unique per (tenant, webhook, delivery id)), the triage
log of rejected ones, and per-webhook token buckets shared by every process."""

from __future__ import annotations

import builtins
import math
import random
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from treadle.store.db import Pool
from treadle.store.schedules import HOOK_RECLAIM_S

#: rejected deliveries kept per webhook for triage
KEEP_REJECTED = 200


@dataclass(slots=True)
class Delivery:
    id: int
    tenant_id: str
    webhook: str
    delivery_id: str | None
    def_id: str | None
    version: int | None
    verdict: str
    state: str
    delivery: str | None
    run_id: str | None
    result: dict[str, Any] | None
    error: str | None
    hooks_status: str
    received_at: datetime
    updated_at: datetime

    def to_api(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "delivery_id": self.delivery_id,
            "verdict": self.verdict,
            "received_at": self.received_at.isoformat(),
            "version": self.version,
        }
        for key in ("run_id", "error", "delivery"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        if self.result:
            out["result"] = self.result
        if self.hooks_status != "none":
            out["hooks_status"] = self.hooks_status
        return out


_COLS = (
    "id, tenant_id, webhook, delivery_id, def_id, version, verdict, state, delivery, run_id, result, error,"
    " hooks_status, received_at, updated_at"
)


def _delivery(row: dict[str, Any]) -> Delivery:
    return Delivery(**row)


class WebhookStore:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def find_accepted(self, tenant_id: str, webhook: str, delivery_id: str) -> Delivery | None:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"SELECT {_COLS} FROM webhook_deliveries WHERE tenant_id = %s AND webhook = %s"
                " AND delivery_id = %s AND verdict = 'accepted'",
                (tenant_id, webhook, delivery_id),
            )
            row = await cur.fetchone()
        return _delivery(row) if row else None

    async def claim(
        self, tenant_id: str, webhook: str, delivery_id: str, def_id: str, version: int, delivery: str
    ) -> Delivery | None:
        """Record the delivery as accepted; None if this delivery id was accepted before."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"""INSERT INTO webhook_deliveries (tenant_id, webhook, delivery_id, def_id, version, verdict,
                                                    state, delivery)
                    VALUES (%s, %s, %s, %s, %s, 'accepted', 'claimed', %s)
                    ON CONFLICT (tenant_id, webhook, delivery_id) WHERE verdict = 'accepted' DO NOTHING
                    RETURNING {_COLS}""",
                (tenant_id, webhook, delivery_id, def_id, version, delivery),
            )
            row = await cur.fetchone()
        return _delivery(row) if row else None

    async def complete(
        self, row_id: int, *, run_id: str | None = None, result: dict[str, Any] | None = None, hooks: bool = False
    ) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(
                """UPDATE webhook_deliveries SET state = 'done', run_id = coalesce(%s, run_id),
                          result = coalesce(%s, result),
                          hooks_status = CASE WHEN %s AND hooks_status = 'none' THEN 'pending' ELSE hooks_status END,
                          updated_at = now()
                   WHERE id = %s""",
                (run_id, Jsonb(result) if result is not None else None, hooks, row_id),
            )

    async def fail(self, row_id: int, verdict: str, error: str) -> None:
        """The accepted delivery could not be delivered: it leaves the uniqueness index, so the
        sender's retry is processed afresh."""
        async with self.pool.connection() as conn:
            await conn.execute(
                "UPDATE webhook_deliveries SET verdict = %s, state = 'done', error = %s, updated_at = now()"
                " WHERE id = %s",
                (verdict, error[:2000], row_id),
            )

    async def record(
        self,
        tenant_id: str,
        webhook: str,
        verdict: str,
        *,
        delivery_id: str | None = None,
        def_id: str | None = None,
        version: int | None = None,
        error: str | None = None,
    ) -> None:
        """A rejected (or duplicate) delivery, for triage; old rejections are pruned now and then."""
        async with self.pool.connection() as conn:
            await conn.execute(
                """INSERT INTO webhook_deliveries (tenant_id, webhook, delivery_id, def_id, version, verdict, error)
                   VALUES (%s, %s, %s, %s, %s, %s, %s)""",
                (tenant_id, webhook, delivery_id, def_id, version, verdict, (error or "")[:2000] or None),
            )
            if random.random() < 0.05:
                await conn.execute(
                    """DELETE FROM webhook_deliveries WHERE id IN (
                         SELECT id FROM webhook_deliveries WHERE tenant_id = %s AND webhook = %s
                           AND verdict <> 'accepted' ORDER BY id DESC OFFSET %s)""",
                    (tenant_id, webhook, KEEP_REJECTED),
                )

    async def recent(self, tenant_id: str, webhook: str, limit: int = 50) -> builtins.list[Delivery]:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"SELECT {_COLS} FROM webhook_deliveries WHERE tenant_id = %s AND webhook = %s"
                " ORDER BY id DESC LIMIT %s",
                (tenant_id, webhook, limit),
            )
            return [_delivery(r) for r in await cur.fetchall()]

    async def take_token(self, tenant_id: str, webhook: str, per_minute: float, burst: int) -> tuple[bool, float]:
        """Token bucket, one atomic statement: (granted, seconds until a token is back when refused)."""
        rate = per_minute / 60.0
        refilled = "least(%(burst)s::float8, w.tokens + extract(epoch FROM now() - w.updated_at) * %(rate)s::float8)"
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"""INSERT INTO webhook_rate AS w (tenant_id, webhook, tokens, granted, updated_at)
                    VALUES (%(t)s, %(w)s, %(burst)s::float8 - 1, true, now())
                    ON CONFLICT (tenant_id, webhook) DO UPDATE SET
                      tokens = {refilled} - CASE WHEN {refilled} >= 1 THEN 1 ELSE 0 END,
                      granted = {refilled} >= 1,
                      updated_at = now()
                    RETURNING tokens, granted""",
                {"t": tenant_id, "w": webhook, "burst": burst, "rate": rate},
            )
            row = await cur.fetchone()
        assert row is not None
        if row["granted"]:
            return True, 0.0
        return False, float(max(1, math.ceil((1.0 - float(row["tokens"])) / rate)))

    # -- on_complete hooks -----------------------------------------------------------------------

    async def claim_hooks(self, limit: int = 100) -> builtins.list[dict[str, Any]]:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                """WITH c AS (
                     SELECT w.id FROM webhook_deliveries w JOIN runs r ON r.id = w.run_id
                     WHERE w.hooks_status IN ('pending', 'running') AND r.status IN ('completed', 'failed', 'cancelled')
                       AND (w.hooks_status = 'pending' OR w.hooks_claimed_at < now() - make_interval(secs => %s))
                     ORDER BY w.id LIMIT %s FOR UPDATE OF w SKIP LOCKED)
                   UPDATE webhook_deliveries w SET hooks_status = 'running', hooks_claimed_at = now()
                   FROM c, runs r WHERE w.id = c.id AND r.id = w.run_id
                   RETURNING w.id, w.tenant_id, w.webhook AS name, w.def_id, w.run_id, r.status AS run_status,
                             r.agent, r.user_id""",
                (HOOK_RECLAIM_S, limit),
            )
            return list(await cur.fetchall())

    async def finish_hooks(self, row_id: int, status: str, result: Any) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(
                "UPDATE webhook_deliveries SET hooks_status = %s, hooks_result = %s, updated_at = now() WHERE id = %s",
                (status, Jsonb(result), row_id),
            )
