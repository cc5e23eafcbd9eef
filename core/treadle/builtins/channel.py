"""Built-in `Channel`: publish, subscribe (parks until a message or timeout), peek, ack, await,
broadcast, list_channels. A parked subscriber holds no worker: publishing pokes its wait key."""

from __future__ import annotations

from typing import Any

from treadle.builtins.args import optional_ttl
from treadle.errors import ToolError, TreadleError
from treadle.store.channels import ChannelDef, ChannelStore, channel_key
from treadle.tools.base import Park, ToolContext, ToolEffects, ToolResult

OPS = ("publish", "subscribe", "peek", "ack", "await", "broadcast", "list_channels")
MAX_WAIT_MS = 7 * 24 * 3600 * 1000  # parked waits cost nothing, so they may be long
MAX_CHANNELS = 32
PREVIEW_CHARS = 200


class ChannelTool:
    name = "Channel"
    effects: ToolEffects = "transactional"  # every write goes through the step's transaction
    description = (
        "Persistent message channels. op: publish (channel, value, ttl_seconds?) | subscribe (channel, "
        "max_messages?, wait_ms? — waits for a message without holding anything) | peek (channel) | "
        "ack (channel, cursor) | await (channels[], mode any|all|at_least, n?, wait_ms?) | "
        "broadcast (channels[], value) | list_channels."
    )
    input_schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "op": {"type": "string", "enum": list(OPS)},
            "channel": {"type": "string"},
            "channels": {"type": "array", "items": {"type": "string"}, "maxItems": MAX_CHANNELS},
            "value": {},
            "ttl_seconds": {"type": "number", "exclusiveMinimum": 0},
            "max_messages": {"type": "integer", "minimum": 1, "maximum": 100},
            "wait_ms": {"type": "integer", "minimum": 0},
            "cursor": {"type": "integer", "minimum": 0},
            "consumer": {"type": "string"},
            "mode": {"type": "string", "enum": ["any", "all", "at_least"]},
            "n": {"type": "integer", "minimum": 1},
        },
        "required": ["op"],
    }

    async def invoke(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult | Park:
        store = ctx.services.channels
        op = args.get("op")
        if op not in OPS:
            raise ToolError(f"Channel: op must be one of {', '.join(OPS)}")
        try:
            if op == "list_channels":
                return ToolResult.json({"channels": [d.to_api() for d in await store.list_defs(ctx.tenant_id)]})
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
        defs = [await store.get_def(ctx.tenant_id, n) for n in names]  # all must exist before any publish
        published: list[dict[str, Any]] = []
        result = ToolResult("")
        for d in defs:
            scope_id = _scope_id(ctx, d)
            msg, dropped = await store.publish(ctx.tenant_id, d, scope_id, args["value"], _ttl(args))
            await ctx.services.waker.poke(ctx.tenant_id, [channel_key(d.name, scope_id)])
            info = {"channel": d.name, "message_id": msg.id, "scope": d.scope, "scope_id": scope_id,
                    "dropped_oldest": dropped}
            published.append(info)
            result.events.append(("channel_publish", {"channel": {**info, "payload_preview": _preview(msg.value)}}))
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
                raise ToolError("Channel.ack: cursor (a message id) is required")
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
                ("channel_delivery", {"channel": {"channel": d.name, "message_id": m.id, "scope": d.scope,
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


def _ttl(args: dict[str, Any]) -> float | None:
    return optional_ttl(args, "Channel")


def _preview(value: Any) -> str:
    import json

    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text[:PREVIEW_CHARS]
