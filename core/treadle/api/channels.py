"""/v1/_channels: declare channels, publish (waking parked subscribers; `deliver_at` delays a
message), peek, await.

loomcycle's channel routes too: `PATCH /v1/_channels/{name}`, `POST …/{name}/purge`,
`POST /v1/_channels/_broadcast` (one payload to many channels, every channel checked before
any is written), subscribe's `wait_ms` long poll, ack's `{ok}` and `cur_0`, and the per-user
family `/v1/users/{user_id}/channels/{name}/publish|subscribe|peek|ack` (a `user`-scoped
channel; the scope id is the path's user id)."""

from __future__ import annotations

import asyncio
import time
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse

from treadle.api.deps import Rt, Who
from treadle.api.errors import AUTHED, BODY, errors
from treadle.api.lazyroute import LazyAPIRoute
from treadle.errors import BadRequest, NotFound, ValidationFailed
from treadle.runtime import Runtime
from treadle.store.channels import ChannelDef, parse_deliver_at
from treadle.wire import (
    Acked,
    AckRequest,
    AwaitRequest,
    AwaitResult,
    Channel,
    ChannelDeleted,
    ChannelList,
    ChannelRequest,
    Peeked,
    Published,
    PublishRequest,
    Subscribed,
    SubscribeRequest,
)
from treadle.wire.channels import (
    BroadcastRequest,
    BroadcastResult,
    ChannelPurged,
    ChannelUpdateRequest,
)

router = APIRouter(prefix="/v1/_channels", tags=["channels"], route_class=LazyAPIRoute)
#: loomcycle's per-user channel routes (scope `user`, the scope id from the path)
user_router = APIRouter(prefix="/v1/users/{user_id}/channels", tags=["channels"], route_class=LazyAPIRoute)
#: the earlier names of the bodies (api/mcp/tools.py uses them)
ChannelBody = ChannelRequest
PublishBody = PublishRequest
AwaitBody = AwaitRequest
SubscribeBody = SubscribeRequest
AckBody = AckRequest
__all__ = ["AckBody", "AwaitBody", "ChannelBody", "PublishBody", "SubscribeBody", "router", "user_router"]


def ttl_seconds(body: ChannelRequest) -> int | None:
    if body.default_ttl is not None and body.default_ttl_seconds is not None \
            and body.default_ttl != body.default_ttl_seconds:
        raise ValidationFailed("default_ttl and default_ttl_seconds name the same TTL; give one")
    return body.default_ttl_seconds or body.default_ttl or None


@router.get("", response_model=ChannelList, response_model_exclude_unset=True, responses=errors(*AUTHED))
async def list_channels(rt: Rt, who: Who) -> dict[str, Any]:
    return {"channels": [d.to_api() for d in await rt.channels.list_defs(who.tenant_id)]}


@router.post("", status_code=201, response_model=Channel, response_model_exclude_unset=True,
             responses=errors(*BODY, 409))
async def create_channel(body: ChannelRequest, rt: Rt, who: Who) -> dict[str, Any]:
    d = ChannelDef(body.name, body.scope, body.semantic, ttl_seconds(body), body.max_messages,
                   body.description)
    out = (await rt.channels.create_def(who.tenant_id, d)).to_api()
    return {**out, "default_ttl": out.get("default_ttl_seconds") or 0}  # loomcycle's name too


@router.delete("/{name}", response_model=ChannelDeleted, response_model_exclude_unset=True,
               responses=errors(*AUTHED, 404))
async def delete_channel(name: str, rt: Rt, who: Who) -> dict[str, Any]:
    if not await rt.channels.delete_def(who.tenant_id, name):
        raise NotFound(f"channel {name!r} not found (channels declared in treadle.yaml cannot be deleted)")
    return {"name": name, "deleted": True}


@router.post("/_await", response_model=AwaitResult, response_model_exclude_unset=True, responses=errors(*BODY, 404))
async def await_channels(body: AwaitRequest, rt: Rt, who: Who) -> dict[str, Any]:
    """Which of `channels` have messages for `consumer` (never consumes); with `wait_ms`, checked
    again until the condition holds or the time is up."""
    deadline = time.monotonic() + body.wait_ms / 1000
    while True:
        counts: dict[str, int] = {}
        for name in dict.fromkeys(body.channels):
            d = await rt.channels.get_def(who.tenant_id, name)
            if body.scope is not None and body.scope != d.scope:
                raise ValidationFailed(f"scope: channel {name!r} is declared with scope {d.scope!r}")
            msgs, _ = await rt.channels.read(
                who.tenant_id, d, "" if d.scope == "global" else body.scope_id, body.consumer, 100, consume=False
            )
            counts[name] = len(msgs)
        need = {"any": 1, "all": len(counts)}.get(body.mode) or min(body.n, len(counts))
        fired = [n for n, c in counts.items() if c > 0]
        satisfied = len(fired) >= need
        if satisfied or time.monotonic() >= deadline:
            return {"satisfied": satisfied, "mode": body.mode, "fired": fired, "counts": counts,
                    "timed_out": not satisfied and body.wait_ms > 0}
        await asyncio.sleep(0.1)


@router.patch("/{name}", response_model=Channel, response_model_exclude_unset=True,
              responses=errors(*BODY, 404, 409))
async def update_channel(name: str, body: ChannelUpdateRequest, rt: Rt, who: Who) -> dict[str, Any]:
    """loomcycle's update: the fields given change (0 clears a TTL or a bound); a channel declared
    in treadle.yaml answers 409 `channel_yaml_immutable`, an unknown one 404 `channel_not_found`."""
    if body.default_ttl is not None and body.default_ttl_seconds is not None \
            and body.default_ttl != body.default_ttl_seconds:
        raise ValidationFailed("default_ttl and default_ttl_seconds name the same TTL; give one")
    changes: dict[str, Any] = {}
    if body.description is not None:
        changes["description"] = body.description
    if body.semantic is not None:
        changes["semantic"] = body.semantic
    ttl = body.default_ttl_seconds if body.default_ttl_seconds is not None else body.default_ttl
    if ttl is not None:
        changes["default_ttl_seconds"] = ttl or None
    if body.max_messages is not None:
        changes["max_messages"] = body.max_messages or None
    out = (await rt.channels.update_def(who.tenant_id, name, changes)).to_api()
    return {**out, "default_ttl": out.get("default_ttl_seconds") or 0}


@router.post("/{name}/purge", response_model=ChannelPurged, responses=errors(*AUTHED, 404))
async def purge_channel(name: str, rt: Rt, who: Who) -> dict[str, Any]:
    """loomcycle's purge: delete the channel's messages, keep its definition and cursors (also
    for a channel declared in treadle.yaml)."""
    return {"name": name, "purged": await rt.channels.purge(who.tenant_id, name)}


@router.post("/_broadcast", response_model=BroadcastResult, response_model_exclude_unset=True,
             responses=errors(*BODY, 404))
async def broadcast(body: BroadcastRequest, rt: Rt, who: Who) -> dict[str, Any]:
    """loomcycle's fan-out: one payload to every channel named (duplicates once). Every channel is
    checked first (unknown: 404, nothing published; declared with another `scope`: 400
    `channel_scope_invalid`); a write that fails after that is reported at its entry."""
    if (body.value is None) == (body.payload is None):
        raise ValidationFailed("payload (or treadle's value): exactly one is required, not null")
    value = body.payload if body.payload is not None else body.value
    deliver_at = parse_deliver_at(body.deliver_at)
    names = list(dict.fromkeys(body.channels))
    for name in names:
        d = await rt.channels.get_def(who.tenant_id, name)
        if body.scope is not None and body.scope != d.scope:
            raise BadRequest(f"scope: channel {name!r} is declared with scope {d.scope!r}",
                             code="channel_scope_invalid")
    results: list[dict[str, Any]] = []
    for name in names:
        try:
            out = await rt.publish(who.tenant_id, name, value, scope_id=body.scope_id, deliver_at=deliver_at)
        except (BadRequest, NotFound) as exc:
            results.append({"channel": name, "error": exc.message})
            continue
        entry = {"channel": name, "msg_id": str(out["message_id"]), "created_at": out["published_at"]}
        if out.get("visible_at") is not None:
            entry["visible_at"] = out["visible_at"]
        results.append(entry)
    failed = sum(1 for r in results if "error" in r)
    return {"published": len(results) - failed, "failed": failed, "results": results}


@router.post("/{name}/subscribe", response_model=Subscribed, response_model_exclude_unset=True,
             responses=errors(*BODY, 404))
async def subscribe(name: str, body: SubscribeRequest, rt: Rt, who: Who) -> dict[str, Any]:
    """loomcycle's subscribe (consumes): `{channel, messages, next_cursor}`; with `wait_ms` and
    nothing to take, it waits up to that long for a publish."""
    d = await rt.channels.get_def(who.tenant_id, name)
    return await _subscribe(rt, who.tenant_id, d, "" if d.scope == "global" else body.scope_id, body)


async def _subscribe(rt: Runtime, tenant_id: str, d: ChannelDef, scope_id: str,
                     body: SubscribeRequest) -> dict[str, Any]:
    deadline = time.monotonic() + body.wait_ms / 1000
    while True:
        msgs, cursor = await rt.channels.read(
            tenant_id, d, scope_id, body.consumer, body.max_messages, consume=True,
            from_cursor=_cursor(body.from_cursor),
        )
        if msgs or time.monotonic() >= deadline:
            break
        await asyncio.sleep(0.1)
    return {"channel": d.name, "messages": [m.to_api() for m in msgs], "next_cursor": str(cursor) if msgs else "",
            "cursor": cursor}


@router.post("/{name}/ack", response_model=Acked, response_model_exclude_unset=True, responses=errors(*BODY, 404))
async def ack(name: str, body: AckRequest, rt: Rt, who: Who) -> dict[str, Any]:
    d = await rt.channels.get_def(who.tenant_id, name)
    return await _ack(rt, who.tenant_id, d, "" if d.scope == "global" else body.scope_id, body)


async def _ack(rt: Runtime, tenant_id: str, d: ChannelDef, scope_id: str, body: AckRequest) -> dict[str, Any]:
    cursor = _cursor(body.cursor)
    if cursor is None:
        raise ValidationFailed("cursor: required")
    acked = await rt.channels.ack(tenant_id, d, scope_id, body.consumer, cursor)
    return {"channel": d.name, "cursor": acked, "acked": True, "ok": True}


def _cursor(raw: str | int | None) -> int | None:
    """treadle's cursors are stream positions (decimal, opaque to a client); loomcycle's `cur_0`
    (the start) is 0."""
    if raw is None or raw == "":
        return None
    if raw == "cur_0":
        return 0
    if isinstance(raw, int) or raw.isdigit():
        return int(raw)
    raise ValidationFailed("cursor: a cursor this API returned (an integer), or cur_0 (the start)")


@router.post("/{name}/publish", status_code=202, response_model=Published, response_model_exclude_unset=True,
             responses=errors(*BODY, 404, 503))
async def publish(name: str, body: PublishRequest, rt: Rt, who: Who) -> JSONResponse:
    return await _publish(rt, who.tenant_id, name, body.scope_id, body)


async def _publish(rt: Runtime, tenant_id: str, name: str, scope_id: str, body: PublishRequest) -> JSONResponse:
    if (body.value is None) == (body.payload is None):
        raise ValidationFailed("value (or loomcycle's payload): exactly one is required, not null")
    deliver_at = parse_deliver_at(body.deliver_at)  # 400 bad_deliver_at: unparseable, or in the past
    result = await rt.publish(
        tenant_id, name, body.value if body.value is not None else body.payload, scope_id=scope_id,
        ttl_s=body.ttl_seconds, deliver_at=deliver_at,
    )
    # loomcycle's names too: msg_id, created_at
    result = {**result, "msg_id": str(result["message_id"]), "created_at": result["published_at"]}
    return JSONResponse(result, status_code=202)


@router.get("/{name}/peek", response_model=Peeked, response_model_exclude_unset=True, responses=errors(*AUTHED, 404))
async def peek(
    name: str,
    rt: Rt,
    who: Who,
    scope_id: str = "",
    consumer: str = "http",
    max_messages: Annotated[int, Query(ge=1, le=100)] = 10,
) -> dict[str, Any]:
    d = await rt.channels.get_def(who.tenant_id, name)
    return await _peek(rt, who.tenant_id, d, "" if d.scope == "global" else scope_id, consumer, max_messages)


async def _peek(rt: Runtime, tenant_id: str, d: ChannelDef, scope_id: str, consumer: str,
                max_messages: int) -> dict[str, Any]:
    msgs, cursor = await rt.channels.read(tenant_id, d, scope_id, consumer, max_messages, consume=False)
    return {"channel": d.name, "messages": [m.to_api() for m in msgs], "cursor": cursor}


# -- loomcycle's per-user family: /v1/users/{user_id}/channels/{name}/… ------------------------------


async def _user_channel(rt: Runtime, tenant_id: str, name: str, user_id: str, body_scope_id: str = "") -> ChannelDef:
    d = await rt.channels.get_def(tenant_id, name)
    if d.scope != "user":
        raise BadRequest(f"channel {name!r} is declared with scope {d.scope!r}; the /v1/users/{{user_id}}/channels"
                         " routes are for user-scoped channels", code="channel_scope_invalid")
    if body_scope_id and body_scope_id != user_id:
        raise BadRequest("scope_id: the path's user id is the scope id; omit scope_id", code="channel_scope_invalid")
    return d


@user_router.post("/{name}/publish", status_code=202, response_model=Published, response_model_exclude_unset=True,
                  responses=errors(*BODY, 400, 404, 503))
async def user_publish(user_id: str, name: str, body: PublishRequest, rt: Rt, who: Who) -> JSONResponse:
    await _user_channel(rt, who.tenant_id, name, user_id, body.scope_id)
    return await _publish(rt, who.tenant_id, name, user_id, body)


@user_router.post("/{name}/subscribe", response_model=Subscribed, response_model_exclude_unset=True,
                  responses=errors(*BODY, 400, 404))
async def user_subscribe(user_id: str, name: str, body: SubscribeRequest, rt: Rt, who: Who) -> dict[str, Any]:
    d = await _user_channel(rt, who.tenant_id, name, user_id, body.scope_id)
    return await _subscribe(rt, who.tenant_id, d, user_id, body)


@user_router.get("/{name}/peek", response_model=Peeked, response_model_exclude_unset=True,
                 responses=errors(*AUTHED, 400, 404))
async def user_peek(
    user_id: str, name: str, rt: Rt, who: Who, consumer: str = "http",
    max_messages: Annotated[int, Query(ge=1, le=100)] = 10,
) -> dict[str, Any]:
    d = await _user_channel(rt, who.tenant_id, name, user_id)
    return await _peek(rt, who.tenant_id, d, user_id, consumer, max_messages)


@user_router.post("/{name}/ack", response_model=Acked, response_model_exclude_unset=True,
                  responses=errors(*BODY, 400, 404))
async def user_ack(user_id: str, name: str, body: AckRequest, rt: Rt, who: Who) -> dict[str, Any]:
    d = await _user_channel(rt, who.tenant_id, name, user_id, body.scope_id)
    return await _ack(rt, who.tenant_id, d, user_id, body)
