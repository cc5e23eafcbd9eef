"""Channels: persistent messages, per-consumer cursors (broadcast) or single delivery (queue).

A channel is declared in treadle.yaml (`channels:`, shared by every tenant) or created over
HTTP (per tenant; a tenant's own definition wins). Messages live per (channel, scope_id):
scope `global` → "", `agent` → the agent's name, `user` → the user id. The wait key of a
stream is `channel_key(name, scope_id)`; publishing pokes it.

Delayed delivery (`deliver_at`): the message is stored at once (its TTL counts from publish) but
stays invisible to every read until `visible_at`. Readers order and count in `pos`, not in the
message id: a message visible at publish has pos = id; a delayed one gets its pos from the id
sequence at the first read at or after `visible_at` (`_promote`), so it lands after everything a
broadcast cursor may already have passed. Its publish also records a timed poke of the stream's
wait key at `visible_at` (store/waits.py `poke_at`): a run parked on the stream wakes then.
"""

from __future__ import annotations

import builtins
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from psycopg.types.json import Jsonb

from treadle.errors import BadRequest, Conflict, NotFound
from treadle.store.db import Pool, current_step_transaction
from treadle.store.waits import WaitStore

MAX_PAYLOAD_BYTES = 64 * 1024
#: a `deliver_at` this far in the past is still accepted (delivered at once): clock skew
DELIVER_AT_SKEW = timedelta(seconds=5)
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
    #: its place in the stream (what cursors count); None while a delayed message is not visible
    pos: int | None = None
    #: when a delayed message (published with deliver_at) becomes visible; None for the others
    visible_at: str | None = None

    @property
    def delayed(self) -> bool:
        return self.visible_at is not None

    def to_api(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "value": self.value, "published_at": self.published_at}
        if self.visible_at is not None:
            out["visible_at"] = self.visible_at
        return out


def _messages(rows: list[dict[str, Any]]) -> list[Message]:
    return [
        Message(
            int(r["id"]), r["payload"], r["published_at"].isoformat(),
            int(r["pos"]) if r["pos"] is not None else None,
            r["visible_at"].isoformat() if r["visible_at"] > r["published_at"] else None,
        )
        for r in rows
    ]


def parse_deliver_at(value: Any, *, now: datetime | None = None) -> datetime | None:
    """A publish's `deliver_at`: an RFC 3339 time with an offset (`2030-01-02T03:04:05Z`), not
    more than DELIVER_AT_SKEW in the past; None when absent. BadRequest (code bad_deliver_at)
    otherwise."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadRequest(f"deliver_at must be an RFC 3339 time string, not {value!r}", code="bad_deliver_at")
    try:
        at = datetime.fromisoformat(value.strip())
    except ValueError:
        at = None
    if at is None or at.tzinfo is None:
        raise BadRequest(
            f"deliver_at {value!r} is not an RFC 3339 time with an offset (e.g. 2030-01-02T03:04:05Z)",
            code="bad_deliver_at",
        )
    now = now or datetime.now(UTC)
    if at < now - DELIVER_AT_SKEW:
        raise BadRequest(
            f"deliver_at {value!r} is in the past (now is {now.isoformat(timespec='seconds')})",
            code="bad_deliver_at",
        )
    return at


_LIVE = "(expires_at IS NULL OR expires_at > now())"
_COLS = "id, payload, published_at, visible_at, pos"


def _pos(m: Message) -> int:
    assert m.pos is not None  # every read filters on pos IS NOT NULL
    return m.pos


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

    async def update_def(self, tenant_id: str, name: str, changes: dict[str, Any]) -> ChannelDef:
        """loomcycle's PATCH: set the given fields of a channel created over the API (`changes`
        keys: description, semantic, default_ttl_seconds, max_messages; None clears a limit).
        A channel declared in treadle.yaml is refused (409 `channel_yaml_immutable`)."""
        allowed = {"description", "semantic", "default_ttl_seconds", "max_messages"}
        assert set(changes) <= allowed, changes
        if changes.get("semantic", "broadcast") not in SEMANTICS:
            raise BadRequest(f"semantic must be one of {SEMANTICS}")
        sets = ", ".join(f"{k} = %({k})s" for k in sorted(changes)) or "name = name"
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"""UPDATE channels SET {sets} WHERE tenant_id = %(t)s AND name = %(n)s
                    RETURNING name, scope, semantic, default_ttl_seconds, max_messages, description""",
                {**changes, "t": tenant_id, "n": name})
            row = await cur.fetchone()
        if row is not None:
            return ChannelDef(**row)
        if name in self.declared:
            raise Conflict(f"channel {name!r} is declared in treadle.yaml; change it there",
                           code="channel_yaml_immutable")
        raise NotFound(f"channel {name!r} not found", code="channel_not_found")

    async def purge(self, tenant_id: str, name: str) -> int:
        """Delete a channel's messages (every scope id), keeping its definition and the consumers'
        cursors; allowed on channels declared in treadle.yaml too. Returns how many went."""
        await self.get_def(tenant_id, name)  # 404 for an unknown channel
        async with self.pool.connection() as conn:
            cur = await conn.execute("DELETE FROM channel_messages WHERE tenant_id = %s AND channel = %s",
                                     (tenant_id, name))
            return cur.rowcount

    # -- messages ----------------------------------------------------------------------------------

    async def publish(
        self, tenant_id: str, d: ChannelDef, scope_id: str, value: Any, ttl_s: float | None = None,
        *, deliver_at: datetime | None = None,
    ) -> tuple[Message, int]:
        """Store one message; returns it and how many old messages `max_messages` dropped. With
        `deliver_at` (see `parse_deliver_at`) later than now, the message is invisible until then
        (`Message.delayed`) and a poke of the stream's wait key is due then."""
        size = len(json.dumps(value).encode())
        if size > MAX_PAYLOAD_BYTES:
            raise BadRequest(f"payload is {size} bytes; the limit is {MAX_PAYLOAD_BYTES}", code="payload_too_large")
        ttl = ttl_s if ttl_s is not None else d.default_ttl_seconds
        if deliver_at is not None and ttl is not None and deliver_at >= datetime.now(UTC) + timedelta(seconds=ttl):
            raise BadRequest(
                f"deliver_at {deliver_at.isoformat()} is after the message expires (its TTL of {ttl:g} s counts"
                " from publish)",
                code="bad_deliver_at",
            )
        async with self.pool.connection() as conn, conn.transaction():
            cur = await conn.execute(
                # one publisher per stream at a time, until its transaction ends (a step's commit when
                # a tool publishes): ids then commit in order, so a broadcast cursor never passes a
                # message that commits later with a smaller id
                """WITH l AS (SELECT pg_advisory_xact_lock(hashtextextended(%(t)s || chr(31) || %(c)s || chr(31)
                                                                          || %(s)s, 7472)) AS ok),
                        n AS (SELECT nextval(pg_get_serial_sequence('channel_messages', 'id')) AS id FROM l)
                   INSERT INTO channel_messages (id, tenant_id, channel, scope_id, payload, expires_at, visible_at,
                                                 pos)
                   SELECT n.id, %(t)s, %(c)s, %(s)s, %(v)s,
                          CASE WHEN %(ttl)s::float8 IS NULL THEN NULL ELSE now() + make_interval(secs => %(ttl)s) END,
                          greatest(now(), coalesce(%(at)s::timestamptz, now())),
                          CASE WHEN coalesce(%(at)s::timestamptz, now()) <= now() THEN n.id END
                   FROM n
                   RETURNING id, payload, published_at, visible_at, pos""",
                {"t": tenant_id, "c": d.name, "s": scope_id, "v": Jsonb(value), "ttl": ttl, "at": deliver_at},
            )
            row = await cur.fetchone()
            assert row is not None
            if row["pos"] is None:
                await WaitStore.poke_at(conn, tenant_id, channel_key(d.name, scope_id), row["visible_at"])
            elif current_step_transaction(self.pool) is None:
                # the wake is part of the commit (store/waits.py, durable pokes); a step's own poke
                # travels in its transaction already
                await WaitStore.poke_soon(conn, tenant_id, [channel_key(d.name, scope_id)])
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

    @staticmethod
    async def _promote(conn: Any, tenant_id: str, channel: str, scope_id: str) -> None:
        """Give the stream's delayed messages that became visible their `pos` (in visible_at
        order), so every reader sees them after what it has read. Concurrent readers wait on the
        row locks (not SKIP LOCKED: a reader that went on could move its cursor past the position
        being given) and then skip what the first one promoted. Inside a step transaction the
        locks are held until the step commits; two steps promoting two channels in opposite
        orders can deadlock, which Postgres breaks by failing one step — retried like any other."""
        await conn.execute(
            """UPDATE channel_messages m SET pos = p.pos
               FROM (SELECT due.id, nextval(pg_get_serial_sequence('channel_messages', 'id')) AS pos
                     FROM (SELECT id FROM channel_messages
                           WHERE tenant_id = %s AND channel = %s AND scope_id = %s AND pos IS NULL
                             AND visible_at <= now()
                           ORDER BY visible_at, id FOR UPDATE) due) p
               WHERE m.id = p.id""",
            (tenant_id, channel, scope_id),
        )

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
        """Visible messages for `consumer`, in stream order. Broadcast: after its cursor (advanced
        when `consume`); queue: unclaimed ones (claimed by it when `consume`). Returns (messages,
        cursor) — a cursor is a stream position (`pos`: the message id, unless it was delayed)."""
        async with self.pool.connection() as conn:
            await self._promote(conn, tenant_id, d.name, scope_id)
            if d.semantic == "queue":
                if consume:
                    cur = await conn.execute(
                        f"""UPDATE channel_messages SET claimed_by = %s, claimed_at = now()
                            WHERE id IN (SELECT id FROM channel_messages
                                         WHERE tenant_id = %s AND channel = %s AND scope_id = %s
                                           AND pos IS NOT NULL AND claimed_by IS NULL AND {_LIVE}
                                         ORDER BY pos LIMIT %s FOR UPDATE SKIP LOCKED)
                            RETURNING {_COLS}""",
                        (consumer, tenant_id, d.name, scope_id, limit),
                    )
                else:
                    cur = await conn.execute(
                        f"""SELECT {_COLS} FROM channel_messages
                            WHERE tenant_id = %s AND channel = %s AND scope_id = %s AND pos IS NOT NULL
                              AND claimed_by IS NULL AND {_LIVE} ORDER BY pos LIMIT %s""",
                        (tenant_id, d.name, scope_id, limit),
                    )
                msgs = sorted(_messages(await cur.fetchall()), key=_pos)
                return msgs, (_pos(msgs[-1]) if msgs else 0)
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
                f"""SELECT {_COLS} FROM channel_messages
                    WHERE tenant_id = %s AND channel = %s AND scope_id = %s AND pos > %s AND {_LIVE}
                    ORDER BY pos LIMIT %s""",
                (tenant_id, d.name, scope_id, cursor, limit),
            )
            msgs = _messages(await cur.fetchall())
            if msgs and consume:
                cursor = _pos(msgs[-1])
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
