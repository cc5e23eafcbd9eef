"""Trigger definitions and schedule admin (bearer; tenant from the principal, never the body).

    POST /v1/_scheduledef, POST /v1/_webhookdef     op dispatch; body = the tool's input JSON
    GET  /v1/_scheduledef/names, /v1/_webhookdef/names
    GET  /v1/_schedules/list-all
    GET  /v1/_schedules/{id}/state                   id: sch_…, a def_id, or the name
    POST /v1/_schedules/{id}/run-now | pause | resume
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from treadle.api.defroutes import add_def_routes
from treadle.api.deps import Rt, Who
from treadle.api.errors import AUTHED, errors
from treadle.api.lazyroute import LazyAPIRoute
from treadle.wire import ScheduleDetail, ScheduleFired, ScheduleList, ScheduleState

router = APIRouter(prefix="/v1", tags=["triggers"], route_class=LazyAPIRoute)
add_def_routes(router, "/_scheduledef", lambda rt: rt.triggers.schedules.family)
add_def_routes(router, "/_webhookdef", lambda rt: rt.triggers.webhooks.family)


@router.get("/_schedules/list-all", response_model=ScheduleList, response_model_exclude_unset=True,
            responses=errors(*AUTHED))
async def list_schedules(rt: Rt, who: Who) -> dict[str, Any]:
    states = await rt.triggers.schedules.store.list(who.tenant_id, include_retired=True)
    return {"schedules": [s.to_api() for s in states]}


@router.get("/_schedules/{ident}/state", response_model=ScheduleDetail, response_model_exclude_unset=True,
            responses=errors(*AUTHED, 404))
async def schedule_state(ident: str, rt: Rt, who: Who) -> dict[str, Any]:
    return await rt.triggers.schedules.state_view(who.tenant_id, ident)


@router.post("/_schedules/{ident}/run-now", response_model=ScheduleFired, response_model_exclude_unset=True,
             responses=errors(*AUTHED, 404, 409))
async def run_now(ident: str, rt: Rt, who: Who) -> dict[str, Any]:
    return await rt.triggers.schedules.run_now(who.tenant_id, ident)


@router.post("/_schedules/{ident}/pause", response_model=ScheduleState, response_model_exclude_unset=True,
             responses=errors(*AUTHED, 404, 409))
async def pause(ident: str, rt: Rt, who: Who) -> dict[str, Any]:
    return await rt.triggers.schedules.pause(who.tenant_id, ident)


@router.post("/_schedules/{ident}/resume", response_model=ScheduleState, response_model_exclude_unset=True,
             responses=errors(*AUTHED, 404, 409))
async def resume(ident: str, rt: Rt, who: Who) -> dict[str, Any]:
    return await rt.triggers.schedules.resume(who.tenant_id, ident)
