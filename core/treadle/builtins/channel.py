"""Built-in `Channel`: publish, subscribe (parks until a message or timeout), peek, ack, await,
broadcast, list_channels. A parked subscriber holds no worker: publishing pokes its wait key.

`deliver_at` (publish/broadcast, RFC 3339): the message is stored now (its TTL counts from
publish) and invisible to subscribe/peek/await until then. How a subscriber parked with `wait_ms`
learns of it: the publish records a timed poke of the stream's wait key at `deliver_at`
(store/waits.py `poke_at`), done by the maintenance pass (RunWaker.wake_due) — the same pass, at
the same granularity, that ends parked waits at their deadline. Capping the park deadline at the
earliest pending `deliver_at` instead was rejected: a call keeps the deadline of its first park
(ToolContext.resume), so a message delayed by a publish made *after* the subscriber parked could
never shorten it, and a woken call that finds nothing (a queue message claimed by another
consumer) would have no deadline left to park until.

Arguments the input schema does not name are refused (code unknown_field), and so are the
publish-only fields (`ttl`, `ttl_seconds`, `deliver_at`) on the other ops."""

from __future__ import annotations

from typing import Any

from treadle.builtins.args import refuse_fields, refuse_unknown, ttl_arg
from treadle.domain.channelacl import Side, channel_allowed, refusal
from treadle.domain.events import EventType
from treadle.errors import ToolError, TreadleError
from treadle.store.channels import ChannelDef, ChannelStore, channel_key, parse_deliver_at
from treadle.tools.base import Park, ToolContext, ToolEffects, ToolResult

OPS = ("publish", "subscribe", "peek", "ack", "await", "broadcast", "list_channels")
MAX_WAIT_MS = 7 * 24 * 3600 * 1000  # parked waits cost nothing, so they may be long
MAX_CHANNELS = 32
PREVIEW_CHARS = 200


class ChannelTool:
    name = "Channel"
    effects: ToolEffects = "transactional"  # every write goes through the step's transaction
    description = (
        "Persistent message channels. op: publish (channel, value, ttl_seconds? (or ttl), deliver_at? — RFC 3339: "
        "invisible until then, TTL counts from publish) | subscribe (channel, "
        "max_messages?, wait_ms? — waits for a message without holding anything) | peek (channel) | "
        "ack (channel, cursor) | await (channels[], mode any|all|at_least, n?, wait_ms?) | "
        "broadcast (channels[], value, ttl_seconds?, deliver_at?) | list_channels."
    )
    input_schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "op": {"type": "string", "enum": list(OPS)},
            "channel": {"type": "string"},
            "channels": {"type": "array", "items": {"type": "string"}, "maxItems": MAX_CHANNELS},
            "value": {},
            "ttl_seconds": {"type": "number", "exclusiveMinimum": 0, "description": "publish: expire after"},
            "ttl": {"type": "number", "minimum": 0,
                    "description": "publish: loomcycle's spelling of ttl_seconds; 0 = the channel's default"},
            "deliver_at": {"type": "string", "format": "date-time",
                           "description": "publish: RFC 3339; the message is invisible until then"},
            "max_messages": {"type": "integer", "minimum": 1, "maximum": 100},
            "wait_ms": {"type": "integer", "minimum": 0},
            "cursor": {"type": "integer", "minimum": 0, "description": "ack: a next_cursor from subscribe"},
            "consumer": {"type": "string"},
            "mode": {"type": "string", "enum": ["any", "all", "at_least"]},
            "n": {"type": "integer", "minimum": 1},
        },
        "required": ["op"],
    }

    async def invoke(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult | Park:
        store = ctx.services.channels
        refuse_unknown(args, self.input_schema, "Channel")
        op = args.get("op")
        if op not in OPS:
            raise ToolError(f"Channel: op must be one of {', '.join(OPS)}")
        if op not in ("publish", "broadcast"):
            refuse_fields(args, ("ttl", "ttl_seconds", "deliver_at"), "Channel", op, "publish and broadcast")
        try:
            if op == "list_channels":
                return await _list(ctx, store)
            _check_acl(ctx, op, args)
            if op in ("publish", "broadcast"):
                return await self._publish(ctx, store, args, op)
            if op == "await":
                return await self._await(ctx, store, args)
            return await self._read(ctx, store, args, op)
        except TreadleError as exc:
            if isinstance(exc, ToolError):
                raise
            raise ToolError(f"Channel.{op}: {exc.message}") from None

    async def _publish(self, ctx: ToolContext, store: ChannelStore, args: dict[str, Any], op: str) -> ToolResult:
        if "value" not in args:
            raise ToolError(f"Channel.{op}: value is required")
        names = _names(args) if op == "broadcast" else [_name(args)]
        ttl, _ = ttl_arg(args, "Channel")  # ttl: 0 → the channel's default_ttl_seconds, as when absent
        deliver_at = parse_deliver_at(args.get("deliver_at"))
        defs = [await store.get_def(ctx.tenant_id, n) for n in names]  # all must exist before any publish
        published: list[dict[str, Any]] = []
        result = ToolResult("")
        for d in defs:
            scope_id = _scope_id(ctx, d)
            msg, dropped = await store.publish(ctx.tenant_id, d, scope_id, args["value"], ttl, deliver_at=deliver_at)
            if not msg.delayed:  # a delayed one pokes the stream when it becomes visible (module docstring)
                await ctx.services.waker.poke(ctx.tenant_id, [channel_key(d.name, scope_id)])
            info: dict[str, Any] = {"channel": d.name, "message_id": msg.id, "scope": d.scope, "scope_id": scope_id,
                                    "dropped_oldest": dropped}
            if msg.visible_at is not None:
                info["visible_at"] = msg.visible_at
            published.append(info)
            preview = {**info, "payload_preview": _preview(msg.value)}
            result.events.append((EventType.CHANNEL_PUBLISH, {"channel": preview}))
        body = published[0] if op == "publish" else {"published": published}
        result.content = ToolResult.json(body).content
        return result

    async def _read(self, ctx: ToolContext, store: ChannelStore, args: dict[str, Any], op: str) -> ToolResult | Park:
        d = await store.get_def(ctx.tenant_id, _name(args))
        scope_id = _scope_id(ctx, d)
        consumer = _consumer(ctx, args)
        if op == "ack":
            cursor = args.get("cursor")
            if not isinstance(cursor, int) or cursor < 0:
                raise ToolError("Channel.ack: cursor (a next_cursor from subscribe) is required")
            done = await store.ack(ctx.tenant_id, d, scope_id, consumer, cursor)
            return ToolResult.json({"channel": d.name, "cursor": done})
        limit = _int(args, "max_messages", 10, 1, 100)
        if op == "peek":
            msgs, cursor = await store.read(ctx.tenant_id, d, scope_id, consumer, limit, consume=False)
            return ToolResult.json({"channel": d.name, "messages": [m.to_api() for m in msgs], "cursor": cursor})
        # subscribe: read the key's version before looking, so a publish in between is never lost
        key = channel_key(d.name, scope_id)
        version = await _version(ctx, key)
        msgs, cursor = await store.read(ctx.tenant_id, d, scope_id, consumer, limit, consume=True)
        wait_ms = _int(args, "wait_ms", 0, 0, MAX_WAIT_MS)
        if not msgs and wait_ms > 0 and not ctx.deadline_passed():
            return Park("channel", {key: version}, deadline_s=wait_ms / 1000, extra={"channel": d.name})
        result = ToolResult.json(
            {"channel": d.name, "messages": [m.to_api() for m in msgs], "next_cursor": cursor,
             "timed_out": not msgs and wait_ms > 0}
        )
        for m in msgs:
            result.events.append(
                (EventType.CHANNEL_DELIVERY, {"channel": {"channel": d.name, "message_id": m.id, "scope": d.scope,
                                                  "scope_id": scope_id, "cursor": cursor,
                                                  "payload_preview": _preview(m.value)}})
            )
        return result

    async def _await(self, ctx: ToolContext, store: ChannelStore, args: dict[str, Any]) -> ToolResult | Park:
        """Wait until messages are available on any / all / at least n of `channels` (never
        consumes and never moves a cursor)."""
        names = _names(args)
        mode = args.get("mode", "any")
        if mode not in ("any", "all", "at_least"):
            raise ToolError("Channel.await: mode must be any, all or at_least")
        need = {"any": 1, "all": len(names)}.get(mode) or _int(args, "n", 1, 1, len(names))
        consumer = _consumer(ctx, args)
        keys: dict[str, int] = {}
        counts: dict[str, int] = {}
        for name in names:
            d = await store.get_def(ctx.tenant_id, name)
            scope_id = _scope_id(ctx, d)
            key = channel_key(d.name, scope_id)
            keys[key] = await _version(ctx, key)
            msgs, _ = await store.read(ctx.tenant_id, d, scope_id, consumer, 100, consume=False)
            counts[name] = len(msgs)
        fired = [n for n in names if counts[n] > 0]
        satisfied = len(fired) >= need
        wait_ms = _int(args, "wait_ms", 0, 0, MAX_WAIT_MS)
        if not satisfied and wait_ms > 0 and not ctx.deadline_passed():
            return Park("channel_await", keys, deadline_s=wait_ms / 1000, extra={"channels": names, "mode": mode})
        return ToolResult.json(
            {"satisfied": satisfied, "timed_out": not satisfied and wait_ms > 0, "mode": mode, "fired": fired,
             "counts": counts}
        )


async def _list(ctx: ToolContext, store: ChannelStore) -> ToolResult:
    """The tenant's channels — with an allowlist, those the agent may use on either side, and
    the allowlists themselves (loomcycle's answer is the two lists)."""
    defs = await store.list_defs(ctx.tenant_id)
    acl = ctx.agent_config.channels
    if acl is None:
        return ToolResult.json({"channels": [d.to_api() for d in defs]})
    usable = [d for d in defs if channel_allowed(d.name, acl.publish) or channel_allowed(d.name, acl.subscribe)]
    return ToolResult.json({"channels": [d.to_api() for d in usable], "publish": acl.publish,
                            "subscribe": acl.subscribe})


def _check_acl(ctx: ToolContext, op: str, args: dict[str, Any]) -> None:
    """The agent's allowlist for `op`'s side (publish, broadcast: publish; the reads: subscribe),
    checked for every channel the call names before anything is read or written."""
    acl = ctx.agent_config.channels
    if acl is None:
        return
    side: Side = "publish" if op in ("publish", "broadcast") else "subscribe"
    names = _names(args) if op in ("broadcast", "await") else [_name(args)]
    for name in names:
        refused = refusal(side, name, acl.publish if side == "publish" else acl.subscribe)
        if refused is not None:
            raise ToolError(refused)


async def _version(ctx: ToolContext, key: str) -> int:
    return await ctx.waits.version(ctx.tenant_id, key)


def _name(args: dict[str, Any]) -> str:
    name = args.get("channel")
    if not isinstance(name, str) or not name:
        raise ToolError("Channel: channel (a name) is required")
    return name


def _names(args: dict[str, Any]) -> list[str]:
    names = args.get("channels")
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
        raise ToolError("Channel: channels (a non-empty list of names) is required")
    if len(names) > MAX_CHANNELS:
        raise ToolError(f"Channel: at most {MAX_CHANNELS} channels")
    return list(dict.fromkeys(names))


def _scope_id(ctx: ToolContext, d: ChannelDef) -> str:
    if d.scope == "agent":
        return ctx.agent
    if d.scope == "user":
        if not ctx.user_id:
            raise ToolError(f"Channel: {d.name!r} is user-scoped and this run has no user_id")
        return ctx.user_id
    return ""


def _consumer(ctx: ToolContext, args: dict[str, Any]) -> str:
    consumer = args.get("consumer")
    if consumer is None:
        return ctx.run_id
    if not isinstance(consumer, str) or not consumer or len(consumer) > 128:
        raise ToolError("Channel: consumer must be a non-empty string (≤128 chars)")
    return consumer


def _int(args: dict[str, Any], key: str, default: int, lo: int, hi: int) -> int:
    v = args.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise ToolError(f"Channel: {key} must be an integer in {lo}..{hi}")
    return v


def _preview(value: Any) -> str:
    import json

    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text[:PREVIEW_CHARS]
