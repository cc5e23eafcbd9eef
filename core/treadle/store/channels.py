"""Channels: persistent messages, per-consumer cursors (broadcast) or single delivery (queue).

A channel is declared in treadle.yaml (`channels:`, shared by every tenant) or created over
HTTP (per tenant; a tenant's own definition wins). Messages live per (channel, scope_id):
scope `global` → "", `agent` → the agent's name, `user` → the user id. The wait key of a
stream is `channel_key(name, scope_id)`; publishing pokes it.
"""

from __future__ import annotations

import builtins
import json
from dataclasses import dataclass
from typing import Any

from psycopg.types.json import Jsonb

from treadle.errors import BadRequest, Conflict, NotFound
from treadle.store.db import Pool

MAX_PAYLOAD_BYTES = 64 * 1024
SCOPES = ("agent", "user", "global")
SEMANTICS = ("queue", "broadcast")


def channel_key(name: str, scope_id: str) -> str:
    return f"channel:{name}:{scope_id}"


@dataclass(slots=True)
class ChannelDef:
    name: str
    scope: str = "global"
    semantic: str = "broadcast"
    default_ttl_seconds: int | None = None
    max_messages: int | None = None
    description: str = ""
    source: str = "api"  # api | yaml

    def to_api(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "scope": self.scope,
            "semantic": self.semantic,
            "default_ttl_seconds": self.default_ttl_seconds,
            "max_messages": self.max_messages,
            "description": self.description,
            "source": self.source,
        }


@dataclass(slots=True)
class Message:
    id: int
    value: Any
    published_at: str

    def to_api(self) -> dict[str, Any]:
        return {"id": self.id, "value": self.value, "published_at": self.published_at}


def _messages(rows: list[dict[str, Any]]) -> list[Message]:
    return [Message(int(r["id"]), r["payload"], r["published_at"].isoformat()) for r in rows]


_LIVE = "(expires_at IS NULL OR expires_at > now())"


class ChannelStore:
    def __init__(self, pool: Pool, declared: dict[str, ChannelDef] | None = None) -> None:
        self.pool = pool
        self.declared = dict(declared or {})

    # -- definitions -------------------------------------------------------------------------------

    async def get_def(self, tenant_id: str, name: str) -> ChannelDef:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT name, scope, semantic, default_ttl_seconds, max_messages, description"
                " FROM channels WHERE tenant_id = %s AND name = %s",
                (tenant_id, name),
            )
            row = await cur.fetchone()
        if row is not None:
            return ChannelDef(**row)
        if name in self.declared:
            return self.declared[name]
        raise NotFound(f"channel {name!r} is not declared")

    async def list_defs(self, tenant_id: str) -> builtins.list[ChannelDef]:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT name, scope, semantic, default_ttl_seconds, max_messages, description"
                " FROM channels WHERE tenant_id = %s ORDER BY name",
                (tenant_id,),
            )
            own = {r["name"]: ChannelDef(**r) for r in await cur.fetchall()}
        merged = {**self.declared, **own}
        return [merged[k] for k in sorted(merged)]

    async def create_def(self, tenant_id: str, d: ChannelDef) -> ChannelDef:
        if d.scope not in SCOPES or d.semantic not in SEMANTICS:
            raise BadRequest(f"scope must be one of {SCOPES} and semantic one of {SEMANTICS}")
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                """INSERT INTO channels (tenant_id, name, scope, semantic, default_ttl_seconds, max_messages,
                                         description)
                   VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING name""",
                (tenant_id, d.name, d.scope, d.semantic, d.default_ttl_seconds, d.max_messages, d.description),
            )
            if await cur.fetchone() is None:
                raise Conflict(f"channel {d.name!r} exists")
        return d

    async def delete_def(self, tenant_id: str, name: str) -> bool:
        async with self.pool.connection() as conn, conn.transaction():
            cur = await conn.execute("DELETE FROM channels WHERE tenant_id = %s AND name = %s", (tenant_id, name))
            if cur.rowcount == 0:
                return False
            await conn.execute("DELETE FROM channel_messages WHERE tenant_id = %s AND channel = %s", (tenant_id, name))
            await conn.execute("DELETE FROM channel_cursors WHERE tenant_id = %s AND channel = %s", (tenant_id, name))
        return True

    # -- messages ----------------------------------------------------------------------------------

    async def publish(
        self, tenant_id: str, d: ChannelDef, scope_id: str, value: Any, ttl_s: float | None = None
    ) -> tuple[Message, int]:
        """Store one message; returns it and how many old messages `max_messages` dropped."""
        size = len(json.dumps(value).encode())
        if size > MAX_PAYLOAD_BYTES:
            raise BadRequest(f"payload is {size} bytes; the limit is {MAX_PAYLOAD_BYTES}", code="payload_too_large")
        ttl = ttl_s if ttl_s is not None else d.default_ttl_seconds
        async with self.pool.connection() as conn, conn.transaction():
            cur = await conn.execute(
                """INSERT INTO channel_messages (tenant_id, channel, scope_id, payload, expires_at)
                   VALUES (%s, %s, %s, %s, CASE WHEN %s::float8 IS NULL THEN NULL
                                              ELSE now() + make_interval(secs => %s) END)
                   RETURNING id, payload, published_at""",
                (tenant_id, d.name, scope_id, Jsonb(value), ttl, ttl),
            )
            row = await cur.fetchone()
            assert row is not None
            dropped = 0
            if d.max_messages:
                cur = await conn.execute(
                    """DELETE FROM channel_messages WHERE id IN (
                           SELECT id FROM channel_messages WHERE tenant_id = %s AND channel = %s AND scope_id = %s
                           ORDER BY id DESC OFFSET %s)""",
                    (tenant_id, d.name, scope_id, d.max_messages),
                )
                dropped = cur.rowcount
        return _messages([row])[0], dropped

    async def read(
        self,
        tenant_id: str,
        d: ChannelDef,
        scope_id: str,
        consumer: str,
        limit: int,
        *,
        consume: bool,
        from_cursor: int | None = None,
    ) -> tuple[builtins.list[Message], int]:
        """Messages for `consumer`. Broadcast: after its cursor (advanced when `consume`);
        queue: unclaimed ones (claimed by it when `consume`). Returns (messages, cursor)."""
        async with self.pool.connection() as conn:
            if d.semantic == "queue":
                if consume:
                    cur = await conn.execute(
                        f"""UPDATE channel_messages SET claimed_by = %s, claimed_at = now()
                            WHERE id IN (SELECT id FROM channel_messages
                                         WHERE tenant_id = %s AND channel = %s AND scope_id = %s
                                           AND claimed_by IS NULL AND {_LIVE}
                                         ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED)
                            RETURNING id, payload, published_at""",
                        (consumer, tenant_id, d.name, scope_id, limit),
                    )
                else:
                    cur = await conn.execute(
                        f"""SELECT id, payload, published_at FROM channel_messages
                            WHERE tenant_id = %s AND channel = %s AND scope_id = %s AND claimed_by IS NULL
                              AND {_LIVE} ORDER BY id LIMIT %s""",
                        (tenant_id, d.name, scope_id, limit),
                    )
                msgs = sorted(_messages(await cur.fetchall()), key=lambda m: m.id)
                return msgs, (msgs[-1].id if msgs else 0)
            cursor = from_cursor
            if cursor is None:
                cur = await conn.execute(
                    "SELECT cursor FROM channel_cursors WHERE tenant_id = %s AND channel = %s AND scope_id = %s"
                    " AND consumer = %s",
                    (tenant_id, d.name, scope_id, consumer),
                )
                row = await cur.fetchone()
                cursor = int(row["cursor"]) if row else 0
            cur = await conn.execute(
                f"""SELECT id, payload, published_at FROM channel_messages
                    WHERE tenant_id = %s AND channel = %s AND scope_id = %s AND id > %s AND {_LIVE}
                    ORDER BY id LIMIT %s""",
                (tenant_id, d.name, scope_id, cursor, limit),
            )
            msgs = _messages(await cur.fetchall())
            if msgs and consume:
                cursor = msgs[-1].id
                await self._set_cursor(conn, tenant_id, d.name, scope_id, consumer, cursor)
            return msgs, cursor

    async def ack(self, tenant_id: str, d: ChannelDef, scope_id: str, consumer: str, cursor: int) -> int:
        """Move a broadcast consumer's cursor forward (never back)."""
        if d.semantic != "broadcast":
            raise BadRequest("ack applies to broadcast channels (queue messages are claimed on subscribe)")
        async with self.pool.connection() as conn:
            return await self._set_cursor(conn, tenant_id, d.name, scope_id, consumer, cursor)

    @staticmethod
    async def _set_cursor(conn: Any, tenant_id: str, channel: str, scope_id: str, consumer: str, cursor: int) -> int:
        cur = await conn.execute(
            """INSERT INTO channel_cursors (tenant_id, channel, scope_id, consumer, cursor)
               VALUES (%s, %s, %s, %s, %s)
               ON CONFLICT (tenant_id, channel, scope_id, consumer)
               DO UPDATE SET cursor = greatest(channel_cursors.cursor, excluded.cursor), updated_at = now()
               RETURNING cursor""",
            (tenant_id, channel, scope_id, consumer, cursor),
        )
        row = await cur.fetchone()
        return int(row["cursor"]) if row else cursor
