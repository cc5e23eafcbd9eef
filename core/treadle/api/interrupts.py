"""Interruptions over HTTP: list a run's questions, a user's inbox, and answer (or decline) one.

`GET /v1/users/{user_id}/interrupts?status=pending|…|all&limit=` → `{user_id, interrupts: [... +
agent]}`, newest first, the questions of every run started for that user (default: pending);
`GET /v1/interrupts?…` → `{interrupts: [... + agent, user_id, parent_run_id]}`: the whole tenant's.

`POST /v1/runs/{run_id}/interrupts/{interrupt_id}/resolve` `{answer, disposition: answer|declined}`
→ `{interrupt_id, status, resolved_at}`; 404 unknown run or interruption, 409 already settled,
410 expired (it is settled as `timed_out` and the run wakes with that result), 422 bad body."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from treadle.api.deps import Rt, Who
from treadle.api.errors import AUTHED, BODY, errors
from treadle.api.lazyroute import LazyAPIRoute
from treadle.errors import (
    InterruptExpired,
    InterruptNotFound,
    InterruptSettled,
    RunNotFound,
    ValidationFailed,
)
from treadle.store.interrupts import STATUSES, InterruptStore, interrupt_key
from treadle.wire import InterruptResolved, ResolveRequest, RunInterrupts, TenantInterrupts, UserInterrupts

router = APIRouter(prefix="/v1", tags=["interrupts"], route_class=LazyAPIRoute)

#: the `status` filters, stated in the spec (the handlers check them too: 422 validation_error)
_RUN_STATUS = Query(max_length=16, json_schema_extra={"enum": list(STATUSES)})
_INBOX_STATUS = Query(max_length=16, json_schema_extra={"enum": [*STATUSES, "all"]})

__all__ = ["ResolveRequest", "router"]


@router.get("/runs/{run_id}/interrupts", response_model=RunInterrupts, response_model_exclude_unset=True,
            responses=errors(*AUTHED, 404))
async def list_interrupts(
    run_id: str, rt: Rt, who: Who, status: Annotated[str | None, _RUN_STATUS] = None
) -> dict[str, Any]:
    if status is not None and status not in STATUSES:
        raise ValidationFailed(f"status: must be one of {', '.join(STATUSES)}")
    if await rt.runs.get(who.tenant_id, run_id) is None:
        raise RunNotFound(f"run {run_id!r} not found")
    rows = await InterruptStore(rt.pool).list_for_run(who.tenant_id, run_id, status)
    return {"run_id": run_id, "interrupts": [r.to_api() for r in rows]}


def _inbox_status(status: str) -> str | None:
    if status != "all" and status not in STATUSES:
        raise ValidationFailed(f"status: must be one of {', '.join(STATUSES)} or all")
    return None if status == "all" else status


@router.get("/users/{user_id}/interrupts", response_model=UserInterrupts, response_model_exclude_unset=True,
            responses=errors(*AUTHED))
async def list_user_interrupts(
    user_id: str,
    rt: Rt,
    who: Who,
    status: Annotated[str, _INBOX_STATUS] = "pending",
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> dict[str, Any]:
    rows = await InterruptStore(rt.pool).list_for_user(who.tenant_id, user_id, _inbox_status(status), limit)
    return {"user_id": user_id, "interrupts": [{**row.to_api(), "agent": run["agent"]} for row, run in rows]}


@router.get("/interrupts", response_model=TenantInterrupts, response_model_exclude_unset=True,
            responses=errors(*AUTHED))
async def list_tenant_interrupts(
    rt: Rt,
    who: Who,
    status: Annotated[str, _INBOX_STATUS] = "pending",
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> dict[str, Any]:
    """The tenant's inbox: the questions of all its runs, newest first (default: pending), each
    with its run's agent, user and parent — one call for a whole inbox."""
    rows = await InterruptStore(rt.pool).list_for_user(who.tenant_id, None, _inbox_status(status), limit)
    return {"interrupts": [{**row.to_api(), "agent": run["agent"], "user_id": run["user_id"],
                            "parent_run_id": run["parent_run_id"]} for row, run in rows]}


@router.post("/runs/{run_id}/interrupts/{interrupt_id}/resolve", response_model=InterruptResolved,
             response_model_exclude_unset=True,
             responses=errors(*BODY, 404, 409, 410))
async def resolve_interrupt(run_id: str, interrupt_id: str, body: ResolveRequest, rt: Rt, who: Who) -> dict[str, Any]:
    if body.disposition == "answer" and not (body.answer or "").strip():
        raise ValidationFailed("answer: required (non-empty) when disposition is 'answer'")
    store = InterruptStore(rt.pool)
    status = "resolved" if body.disposition == "answer" else "declined"
    row = await store.resolve(who.tenant_id, run_id, interrupt_id, answer=body.answer, status=status,
                              resolved_by=body.resolved_by)
    if row is not None:
        await rt.poke(who.tenant_id, [interrupt_key(row.id)])
        return {"interrupt_id": row.id, "status": row.status,
                "resolved_at": row.resolved_at.isoformat() if row.resolved_at else None}
    current = await store.get(who.tenant_id, run_id, interrupt_id)
    if current is None:
        raise InterruptNotFound(f"interrupt {interrupt_id!r} not found in run {run_id!r}")
    if current.expired:  # past its deadline, not yet swept: settle it now and wake the run
        if await store.time_out(who.tenant_id, run_id, interrupt_id) is not None:
            await rt.poke(who.tenant_id, [interrupt_key(interrupt_id)])
        raise InterruptExpired(f"interrupt {interrupt_id} expired")
    if current.status == "timed_out":
        raise InterruptExpired(f"interrupt {interrupt_id} expired")
    if current.status == "pending":
        raise InterruptSettled(f"interrupt {interrupt_id} can no longer be answered: its run has finished")
    if (current.status, current.answer) == (status, body.answer) and \
            await rt.poke(who.tenant_id, [interrupt_key(interrupt_id)]):
        # the same answer again while the run still waits (the first request's wake was lost): a
        # retry, and it wakes the run
        return {"interrupt_id": current.id, "status": current.status,
                "resolved_at": current.resolved_at.isoformat() if current.resolved_at else None}
    raise InterruptSettled(f"interrupt {interrupt_id} is already {current.status}")
