"""/v1/_channels: declare channels, publish (waking parked subscribers; `deliver_at` delays a
message), peek, await."""

from __future__ import annotations

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
    model_config = ConfigDict(extra="forbid")
    value: Any = Field(...)
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
    """Which of `channels` have messages for `consumer` right now (never consumes)."""
    counts: dict[str, int] = {}
    for name in dict.fromkeys(body.channels):
        d = await rt.channels.get_def(who.tenant_id, name)
        msgs, _ = await rt.channels.read(
            who.tenant_id, d, "" if d.scope == "global" else body.scope_id, body.consumer, 100, consume=False
        )
        counts[name] = len(msgs)
    need = {"any": 1, "all": len(counts)}.get(body.mode) or min(body.n, len(counts))
    fired = [n for n, c in counts.items() if c > 0]
    return {"satisfied": len(fired) >= need, "mode": body.mode, "fired": fired, "counts": counts}


@router.post("/{name}/publish", status_code=202)
async def publish(name: str, body: PublishBody, rt: Rt, who: Who) -> JSONResponse:
    deliver_at = parse_deliver_at(body.deliver_at)  # 400 bad_deliver_at: unparseable, or in the past
    result = await rt.publish(
        who.tenant_id, name, body.value, scope_id=body.scope_id, ttl_s=body.ttl_seconds, deliver_at=deliver_at
    )
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
