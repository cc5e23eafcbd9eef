"""Trigger definitions and schedule admin (bearer; tenant from the principal, never the body).

    POST /v1/_scheduledef, POST /v1/_webhookdef     op dispatch; body = the tool's input JSON
    GET  /v1/_scheduledef/names, /v1/_webhookdef/names
    GET  /v1/_schedules/list-all
    GET  /v1/_schedules/{id}/state                   id: sch_…, a def_id, or the name
    POST /v1/_schedules/{id}/run-now | pause | resume
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request

from treadle.api.deps import get_principal, get_runtime
from treadle.errors import BadRequest
from treadle.runtime import Runtime
from treadle.schedule.defops import DefFamily
from treadle.schedule.service import schedule_service
from treadle.security.principal import Principal
from treadle.webhooks.service import webhook_service

router = APIRouter(prefix="/v1", tags=["triggers"])
Rt = Annotated[Runtime, Depends(get_runtime)]
Who = Annotated[Principal, Depends(get_principal)]


async def _op_body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw.strip():
        raise BadRequest("the body is the op input: {\"op\": ..., ...}")
    try:
        body = json.loads(raw)
    except ValueError:
        raise BadRequest("the body is not valid JSON") from None
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    return body


async def _names(family: DefFamily, tenant: str) -> dict[str, Any]:
    records = await family.defs.list(tenant, family.kind)
    return {"names": sorted({r.name for r in records if r.active})}


@router.post("/_scheduledef")
async def scheduledef(request: Request, rt: Rt, who: Who) -> dict[str, Any]:
    return await schedule_service(rt).family.dispatch(who.tenant_id, await _op_body(request))


@router.get("/_scheduledef/names")
async def scheduledef_names(rt: Rt, who: Who) -> dict[str, Any]:
    return await _names(schedule_service(rt).family, who.tenant_id)


@router.post("/_webhookdef")
async def webhookdef(request: Request, rt: Rt, who: Who) -> dict[str, Any]:
    return await webhook_service(rt).family.dispatch(who.tenant_id, await _op_body(request))


@router.get("/_webhookdef/names")
async def webhookdef_names(rt: Rt, who: Who) -> dict[str, Any]:
    return await _names(webhook_service(rt).family, who.tenant_id)


@router.get("/_schedules/list-all")
async def list_schedules(rt: Rt, who: Who) -> dict[str, Any]:
    states = await schedule_service(rt).store.list(who.tenant_id, include_retired=True)
    return {"schedules": [s.to_api() for s in states]}


@router.get("/_schedules/{ident}/state")
async def schedule_state(ident: str, rt: Rt, who: Who) -> dict[str, Any]:
    return await schedule_service(rt).state_view(who.tenant_id, ident)


@router.post("/_schedules/{ident}/run-now")
async def run_now(ident: str, rt: Rt, who: Who) -> dict[str, Any]:
    return await schedule_service(rt).run_now(who.tenant_id, ident)


@router.post("/_schedules/{ident}/pause")
async def pause(ident: str, rt: Rt, who: Who) -> dict[str, Any]:
    return await schedule_service(rt).pause(who.tenant_id, ident)


@router.post("/_schedules/{ident}/resume")
async def resume(ident: str, rt: Rt, who: Who) -> dict[str, Any]:
    return await schedule_service(rt).resume(who.tenant_id, ident)
