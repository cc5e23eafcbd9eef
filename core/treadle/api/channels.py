"""/v1/_channels: declare channels, publish (waking parked subscribers; `deliver_at` delays a
message), peek, await."""

from __future__ import annotations

import asyncio
import time
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from treadle.api.deps import get_principal, get_runtime
from treadle.errors import NotFound, ValidationFailed
from treadle.runtime import Runtime
from treadle.security.principal import Principal
from treadle.store.channels import ChannelDef, parse_deliver_at

router = APIRouter(prefix="/v1/_channels", tags=["channels"])
Rt = Annotated[Runtime, Depends(get_runtime)]
Who = Annotated[Principal, Depends(get_principal)]
NAME = r"^[A-Za-z0-9_.:/-]{1,128}$"


class ChannelBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=NAME)
    scope: Literal["agent", "user", "global"] = "global"
    semantic: Literal["queue", "broadcast"] = "broadcast"
    default_ttl_seconds: int | None = Field(default=None, gt=0)
    #: loomcycle's name of default_ttl_seconds (seconds; 0 = none)
    default_ttl: int | None = Field(default=None, ge=0)
    max_messages: int | None = Field(default=None, gt=0)
    description: str = ""

    def ttl_seconds(self) -> int | None:
        if self.default_ttl is not None and self.default_ttl_seconds is not None \
                and self.default_ttl != self.default_ttl_seconds:
            raise ValidationFailed("default_ttl and default_ttl_seconds name the same TTL; give one")
        return self.default_ttl_seconds or self.default_ttl or None


class PublishBody(BaseModel):
    """`value` (treadle) or `payload` (loomcycle's name); one of them, not null."""

    model_config = ConfigDict(extra="forbid")
    value: Any = None
    payload: Any = None
    scope_id: str = ""
    ttl_seconds: float | None = Field(default=None, gt=0)
    #: RFC 3339 with an offset; the message is invisible until then (its TTL counts from publish)
    deliver_at: str | None = None


class AwaitBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    channels: list[str] = Field(min_length=1, max_length=32)
    mode: Literal["any", "all", "at_least"] = "any"
    n: int = Field(default=1, ge=1)
    scope_id: str = ""
    consumer: str = "http"
    #: loomcycle's: the scope the channels are declared with (checked), and how long to wait for
    #: the condition (polled; at most 30 s)
    scope: Literal["agent", "user", "global"] | None = None
    wait_ms: int = Field(default=0, ge=0, le=30_000)


class SubscribeBody(BaseModel):
    """loomcycle's subscribe: take up to `max_messages` (queue: claim them; broadcast: advance
    the consumer's cursor)."""

    model_config = ConfigDict(extra="forbid")
    scope_id: str = ""
    consumer: str = "http"
    max_messages: int = Field(default=10, ge=1, le=100)
    from_cursor: str | None = None


class AckBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    cursor: str | int
    scope_id: str = ""
    consumer: str = "http"


@router.get("")
async def list_channels(rt: Rt, who: Who) -> dict[str, Any]:
    return {"channels": [d.to_api() for d in await rt.channels.list_defs(who.tenant_id)]}


@router.post("", status_code=201)
async def create_channel(body: ChannelBody, rt: Rt, who: Who) -> dict[str, Any]:
    d = ChannelDef(body.name, body.scope, body.semantic, body.ttl_seconds(), body.max_messages,
                   body.description)
    out = (await rt.channels.create_def(who.tenant_id, d)).to_api()
    return {**out, "default_ttl": out.get("default_ttl_seconds") or 0}  # loomcycle's name too


@router.delete("/{name}")
async def delete_channel(name: str, rt: Rt, who: Who) -> dict[str, Any]:
    if not await rt.channels.delete_def(who.tenant_id, name):
        raise NotFound(f"channel {name!r} not found (channels declared in treadle.yaml cannot be deleted)")
    return {"name": name, "deleted": True}


@router.post("/_await")
async def await_channels(body: AwaitBody, rt: Rt, who: Who) -> dict[str, Any]:
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


@router.post("/{name}/subscribe")
async def subscribe(name: str, body: SubscribeBody, rt: Rt, who: Who) -> dict[str, Any]:
    """loomcycle's subscribe (consumes): `{channel, messages, next_cursor}`."""
    d = await rt.channels.get_def(who.tenant_id, name)
    msgs, cursor = await rt.channels.read(
        who.tenant_id, d, "" if d.scope == "global" else body.scope_id, body.consumer, body.max_messages,
        consume=True, from_cursor=_cursor(body.from_cursor),
    )
    return {"channel": d.name, "messages": [m.to_api() for m in msgs], "next_cursor": str(cursor) if msgs else "",
            "cursor": cursor}


@router.post("/{name}/ack")
async def ack(name: str, body: AckBody, rt: Rt, who: Who) -> dict[str, Any]:
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


@router.post("/{name}/publish", status_code=202)
async def publish(name: str, body: PublishBody, rt: Rt, who: Who) -> JSONResponse:
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


@router.get("/{name}/peek")
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
