"""/v1/_channels: declare channels, publish (waking parked subscribers; `deliver_at` delays a
message), peek, await."""

from __future__ import annotations

import asyncio
import time
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse

from treadle.api.deps import Rt, Who
from treadle.api.errors import AUTHED, BODY, errors
from treadle.api.lazyroute import LazyAPIRoute
from treadle.errors import NotFound, ValidationFailed
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

router = APIRouter(prefix="/v1/_channels", tags=["channels"], route_class=LazyAPIRoute)
#: the earlier names of the bodies (api/mcp/tools.py uses them)
ChannelBody = ChannelRequest
PublishBody = PublishRequest
AwaitBody = AwaitRequest
SubscribeBody = SubscribeRequest
AckBody = AckRequest
__all__ = ["AckBody", "AwaitBody", "ChannelBody", "PublishBody", "SubscribeBody", "router"]


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


@router.post("/{name}/subscribe", response_model=Subscribed, response_model_exclude_unset=True,
             responses=errors(*BODY, 404))
async def subscribe(name: str, body: SubscribeRequest, rt: Rt, who: Who) -> dict[str, Any]:
    """loomcycle's subscribe (consumes): `{channel, messages, next_cursor}`."""
    d = await rt.channels.get_def(who.tenant_id, name)
    msgs, cursor = await rt.channels.read(
        who.tenant_id, d, "" if d.scope == "global" else body.scope_id, body.consumer, body.max_messages,
        consume=True, from_cursor=_cursor(body.from_cursor),
    )
    return {"channel": d.name, "messages": [m.to_api() for m in msgs], "next_cursor": str(cursor) if msgs else "",
            "cursor": cursor}


@router.post("/{name}/ack", response_model=Acked, response_model_exclude_unset=True, responses=errors(*BODY, 404))
async def ack(name: str, body: AckRequest, rt: Rt, who: Who) -> dict[str, Any]:
    d = await rt.channels.get_def(who.tenant_id, name)
    cursor = _cursor(body.cursor)
    if cursor is None:
        raise ValidationFailed("cursor: required")
    acked = await rt.channels.ack(who.tenant_id, d, "" if d.scope == "global" else body.scope_id, body.consumer,
                                  cursor)
    return {"channel": d.name, "cursor": acked, "acked": True}


def _cursor(raw: str | int | None) -> int | None:
    if raw is None or raw == "":
        return None
    if isinstance(raw, int) or raw.isdigit():
        return int(raw)
    raise ValidationFailed("cursor: a cursor this API returned (an integer)")


@router.post("/{name}/publish", status_code=202, response_model=Published, response_model_exclude_unset=True,
             responses=errors(*BODY, 404, 503))
async def publish(name: str, body: PublishRequest, rt: Rt, who: Who) -> JSONResponse:
    if (body.value is None) == (body.payload is None):
        raise ValidationFailed("value (or loomcycle's payload): exactly one is required, not null")
    deliver_at = parse_deliver_at(body.deliver_at)  # 400 bad_deliver_at: unparseable, or in the past
    result = await rt.publish(
        who.tenant_id, name, body.value if body.value is not None else body.payload, scope_id=body.scope_id,
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
    msgs, cursor = await rt.channels.read(
        who.tenant_id, d, "" if d.scope == "global" else scope_id, consumer, max_messages, consume=False
    )
    return {"channel": d.name, "messages": [m.to_api() for m in msgs], "cursor": cursor}
