"""loomcycle's channel, hook and run-state meta-tools, under its names and argument schemas
(`internal/api/mcp/tools.go`): `channel` (the op wrapper), `channeldef`, `subscribe_channel`,
`ack_channel`, `register_hook`, `list_hooks`, `delete_hook`, `stream_user_run_states`. Each does
what the matching HTTP route does (api/channels.py, api/hooks.py, api/agentstream.py).

`scope` selects the cursor namespace as in loomcycle: `global`, or `user` with the user id as
`scope_id` (required then); a channel declared with another scope is refused with
`channel_scope_invalid`. Where loomcycle's semantics differ from treadle's HTTP route they follow
loomcycle: re-registering a hook's (owner, name) replaces it with a fresh id; a hook's
`fail_mode` defaults to `open` and `timeout_ms: 0` means the default (5 s)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from typing import Any, Literal

from pydantic import Field

from treadle.api import channels, hooks
from treadle.api.agentstream import state_frame, transitions
from treadle.api.mcp.registry import _Args, tool
from treadle.errors import BadRequest, ValidationFailed
from treadle.hooks.calls import DEFAULT_SECRET_ENV
from treadle.runtime import Runtime
from treadle.security.principal import Principal
from treadle.store.channels import ChannelDef
from treadle.wire.channels import (
    AckRequest,
    AwaitRequest,
    BroadcastRequest,
    ChannelRequest,
    ChannelUpdateRequest,
    PublishRequest,
    SubscribeRequest,
)
from treadle.wire.hooks import HookRequest

Scope = Literal["global", "user"]
#: stream_user_run_states: how often the rows are read (as the SSE route reads them)
RUN_STATE_POLL_S = 0.25


class _Scoped(_Args):
    channel: str = Field(min_length=1, max_length=128)
    scope: Scope
    scope_id: str = ""


async def _channel(rt: Runtime, who: Principal, a: _Scoped) -> tuple[ChannelDef, str]:
    """The channel and the scope id its cursors use, checked against loomcycle's `scope`."""
    d = await rt.channels.get_def(who.tenant_id, a.channel)
    if a.scope == "user":
        if not a.scope_id:
            raise ValidationFailed("scope_id: required when scope is 'user' (the user id)")
        if d.scope != "user":
            raise BadRequest(f"channel {a.channel!r} is declared with scope {d.scope!r}, not 'user'",
                             code="channel_scope_invalid")
        return d, a.scope_id
    if d.scope == "user":
        raise BadRequest(f"channel {a.channel!r} is per user: pass scope 'user' and the user id as scope_id",
                         code="channel_scope_invalid")
    return d, "" if d.scope == "global" else a.scope_id


class SubscribeArgs(_Scoped):
    from_cursor: str | None = None
    max_messages: int = Field(default=10, ge=1, le=100)
    wait_ms: int = Field(default=0, ge=0, le=30_000)


@tool("subscribe_channel", "Read (and commit) the next batch of a channel's messages; with nothing to take, "
      "wait up to wait_ms for a publish. scope: global, or user with the user id as scope_id.", SubscribeArgs)
async def subscribe_channel(rt: Runtime, who: Principal, a: SubscribeArgs) -> dict[str, Any]:
    d, scope_id = await _channel(rt, who, a)
    body = SubscribeRequest(consumer="mcp", from_cursor=a.from_cursor, max_messages=a.max_messages, wait_ms=a.wait_ms)
    return await channels._subscribe(rt, who.tenant_id, d, scope_id, body)


class AckArgs(_Scoped):
    cursor: str = Field(min_length=1)


@tool("ack_channel", "Advance the committed cursor of a (channel, scope, scope_id) to `cursor`.", AckArgs)
async def ack_channel(rt: Runtime, who: Principal, a: AckArgs) -> dict[str, Any]:
    d, scope_id = await _channel(rt, who, a)
    return await channels._ack(rt, who.tenant_id, d, scope_id, AckRequest(cursor=a.cursor, consumer="mcp"))


class ChannelDefArgs(_Args):
    op: Literal["create", "update", "delete", "purge"]
    name: str = Field(min_length=1, max_length=128)
    description: str | None = None
    scope: Literal["global", "agent", "user"] | None = None

@tool("channeldef", "Channel admin (as /v1/_channels): op create|update|delete|purge. treadle.yaml channels are "
      "immutable for create/update/delete (channel_yaml_immutable); purge clears any channel's messages.",
      ChannelDefArgs)
async def channeldef(rt: Runtime, who: Principal, a: ChannelDefArgs) -> dict[str, Any]:
    if a.op == "create":
        return await channels.create_channel(
            ChannelRequest(name=a.name, scope=a.scope or "global", description=a.description or ""), rt, who)
    if a.scope is not None:
        raise ValidationFailed(f"scope: for op 'create' only, not {a.op!r}")
    if a.op == "update":
        return await channels.update_channel(a.name, ChannelUpdateRequest(description=a.description), rt, who)
    if a.description is not None:
        raise ValidationFailed(f"description: for ops 'create' and 'update', not {a.op!r}")
    if a.op == "delete":
        return await channels.delete_channel(a.name, rt, who)
    return await channels.purge_channel(a.name, rt, who)


class ChannelArgs(_Args):
    """loomcycle's Channel builtin's op input, as an MCP caller (no run) can use it."""

    op: Literal["publish", "subscribe", "ack", "peek", "list_channels", "await", "broadcast"]
    channel: str | None = Field(default=None, min_length=1, max_length=128)
    channels: list[str] | None = None
    scope: Scope = "global"
    scope_id: str = ""
    payload: Any = None
    deliver_at: str | None = None
    from_cursor: str | None = None
    cursor: str | None = None
    max_messages: int = Field(default=10, ge=1, le=100)
    wait_ms: int = Field(default=0, ge=0, le=30_000)
    mode: str | None = None
    n: int | None = None


def _only(a: ChannelArgs, allowed: set[str]) -> None:
    extra = sorted(a.model_fields_set - allowed - {"op"})
    if extra:
        raise ValidationFailed(f"{', '.join(extra)}: not an argument of op {a.op!r}")


@tool("channel", "Channel ops (publish/subscribe/ack/peek/list_channels/await/broadcast), the op wrapper of "
      "the channel tools above.", ChannelArgs)
async def channel(rt: Runtime, who: Principal, a: ChannelArgs) -> dict[str, Any]:
    scoped = {"channel", "scope", "scope_id"}
    if a.op == "list_channels":
        _only(a, set())
        return await channels.list_channels(rt, who)
    if a.op in ("await", "broadcast"):
        fields = {"channels", "scope", "scope_id", "mode", "n", "wait_ms"} if a.op == "await" else \
            {"channels", "scope", "scope_id", "payload", "deliver_at"}
        _only(a, fields)
        body = {k: getattr(a, k) for k in fields if k in a.model_fields_set}
        if a.op == "await":
            return await channels.await_channels(AwaitRequest.model_validate(body), rt, who)
        return await channels.broadcast(BroadcastRequest.model_validate(body), rt, who)
    if a.channel is None:
        raise ValidationFailed(f"channel: required for op {a.op!r}")
    where = _Scoped(channel=a.channel, scope=a.scope, scope_id=a.scope_id)
    if a.op == "publish":
        _only(a, scoped | {"payload", "deliver_at"})
        d, scope_id = await _channel(rt, who, where)
        published = await channels._publish(rt, who.tenant_id, d.name, scope_id,
                                            PublishRequest(payload=a.payload, deliver_at=a.deliver_at))
        return dict(_json(published.body))
    if a.op == "subscribe":
        _only(a, scoped | {"from_cursor", "max_messages", "wait_ms"})
        return await subscribe_channel(rt, who, SubscribeArgs(**where.model_dump(), from_cursor=a.from_cursor,
                                                              max_messages=a.max_messages, wait_ms=a.wait_ms))
    if a.op == "ack":
        _only(a, scoped | {"cursor"})
        if a.cursor is None:
            raise ValidationFailed("cursor: required for op 'ack'")
        return await ack_channel(rt, who, AckArgs(**where.model_dump(), cursor=a.cursor))
    _only(a, scoped | {"max_messages"})
    d, scope_id = await _channel(rt, who, where)
    return await channels._peek(rt, who.tenant_id, d, scope_id, "mcp", a.max_messages)


def _json(body: bytes | memoryview) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(bytes(body))
    return out


class RegisterHookArgs(_Args):
    owner: str
    name: str
    phase: Literal["pre", "post"]
    agents: list[str] = []
    tools: list[str] = []
    callback_url: str
    fail_mode: Literal["open", "closed"] = "open"  # loomcycle's default
    timeout_ms: int = Field(default=0, ge=0, le=30_000)  # 0: the default (5 s)


@tool("register_hook", "Register a pre- or post-tool webhook; re-registering the same (owner, name) replaces "
      "it with a fresh id. Returns the hook ({id, ...}).", RegisterHookArgs)
async def register_hook(rt: Runtime, who: Principal, a: RegisterHookArgs) -> dict[str, Any]:
    body = HookRequest(owner=a.owner, name=a.name, phase=a.phase, agents=a.agents, tools=a.tools,
                       callback_url=a.callback_url, fail_mode=a.fail_mode, timeout_ms=a.timeout_ms or 5000)
    if not os.environ.get(DEFAULT_SECRET_ENV):  # refused before the old entry goes (create_hook says why)
        return await hooks.create_hook(body, rt, who)
    for old in await rt.hooks.store.list(who.tenant_id):
        if (old.owner, old.name) == (a.owner, a.name):
            await rt.hooks.store.delete(who.tenant_id, old.id)
    return await hooks.create_hook(body, rt, who)


class NoArgs(_Args):
    pass


@tool("list_hooks", "Every registered hook of the tenant, in registration order: {hooks: [...]}.", NoArgs)
async def list_hooks(rt: Runtime, who: Principal, _a: NoArgs) -> dict[str, Any]:
    return await hooks.list_hooks(rt, who)


class DeleteHookArgs(_Args):
    id: str = Field(min_length=1)


@tool("delete_hook", "Delete a hook by id: {deleted: id}; hook_not_found when none has that id.", DeleteHookArgs)
async def delete_hook(rt: Runtime, who: Principal, a: DeleteHookArgs) -> dict[str, Any]:
    await hooks.delete_hook(a.id, rt, who)
    return {"deleted": a.id}


class RunStatesArgs(_Args):
    user_id: str = Field(min_length=1, max_length=128)
    statuses: list[str] = []
    agent: str | None = None
    max_events: int = Field(default=16, ge=1, le=1000)
    timeout_ms: int = Field(default=30_000, ge=100, le=300_000)


@tool("stream_user_run_states", "The run state transitions of one user after the call: waits until "
      "max_events have happened or timeout_ms has passed; {events: [...], count}.", RunStatesArgs)
async def stream_user_run_states(rt: Runtime, who: Principal, a: RunStatesArgs) -> dict[str, Any]:
    events: list[dict[str, Any]] = []
    deadline = time.monotonic() + a.timeout_ms / 1000
    if rt.sse_budget_s is not None:  # the cloud shape: within the invocation
        deadline = min(deadline, time.monotonic() + rt.sse_budget_s)
    changes = transitions(rt.pool, who.tenant_id, a.user_id, sorted(set(a.statuses)), a.agent,
                          poll_s=RUN_STATE_POLL_S)
    async with contextlib.aclosing(changes):
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                async for batch in changes:
                    events += [state_frame(s) for s in batch]
                    if len(events) >= a.max_events:
                        break
    events = events[:a.max_events]
    return {"events": events, "count": len(events)}
