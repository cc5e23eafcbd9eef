"""Resident sub-agents from outside (loomcycle's RFC BK P3 routes): `GET /v1/_resident` lists the
open ones, `POST /v1/_resident/{run_id}/close` ends one, `POST /v1/_resident/{run_id}/cancel`
stops its current turn (it stays alive). A tenant's caller sees and acts on its own tenant's; the
operator on every tenant's (`?tenant=` focuses the list). Another tenant's resident is 404
`resident_not_found`, as an unknown one. See builtins/resident.py for the Agent tool's ops."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query

from treadle.api.deps import Rt, Who
from treadle.api.errors import AUTHED, errors
from treadle.api.lazyroute import LazyAPIRoute
from treadle.api.steering import cancel_turn
from treadle.api.tenantscope import focused_tenant
from treadle.errors import NotMidTurn, ResidentNotFound, RunFinished
from treadle.runtime import Runtime
from treadle.security.principal import Principal
from treadle.store.residents import Resident
from treadle.wire import ResidentCancelled, ResidentClosed, ResidentList

router = APIRouter(prefix="/v1", tags=["runs"], route_class=LazyAPIRoute)

CLOSED_BY_OPERATOR = "closed by operator"


@router.get("/_resident", response_model=ResidentList, response_model_exclude_none=True,
            responses=errors(*AUTHED, 400))
async def list_residents(rt: Rt, who: Who, tenant: str | None = Query(default=None),
                         parent_run_id: str | None = Query(default=None),
                         include_closed: bool = Query(default=False)) -> dict[str, Any]:
    """The open resident sub-agents (`Agent op=open`) → `{resident: [{child_run_id, agent_id,
    agent, parent_agent_id, parent_run_id, tenant_id, state, idle_ttl_seconds, last_used_at, …}]}`,
    newest first; `parent_run_id` narrows to one run's, `include_closed` adds closed and ended
    ones (with `closed_at`, `close_reason`)."""
    scope = focused_tenant(who, tenant, doing="lists the resident sub-agents of")
    rows = await rt.residents.listing(scope, include_closed=include_closed, parent_run_id=parent_run_id)
    return {"resident": [r.to_api() for r in rows]}


async def _resident(rt: Runtime, who: Principal, run_id: str) -> Resident:
    resident = await rt.residents.get(focused_tenant(who, None, doing="acts on the resident sub-agents of"), run_id)
    if resident is None:
        raise ResidentNotFound(f"no resident sub-agent for run {run_id!r}")
    return resident


async def close_resident(rt: Runtime, who: Principal, run_id: str) -> dict[str, Any]:
    """End a resident: it closes and its run is cancelled (`closed by operator`); idempotent for a
    known one (the route and the MCP tool)."""
    resident = await _resident(rt, who, run_id)
    if await rt.residents.mark_closed(resident.tenant_id, run_id, CLOSED_BY_OPERATOR) and not resident.ended:
        await rt.cancel_run(resident.tenant_id, run_id, CLOSED_BY_OPERATOR)
    return {"run_id": run_id, "closed": True}


async def cancel_resident_turn(rt: Runtime, who: Principal, run_id: str) -> dict[str, Any]:
    """Stop a resident's current turn (a turn cancel: it parks for input again, alive); `stopped`
    false when it was not mid-turn (parked, ended or closed)."""
    resident = await _resident(rt, who, run_id)
    if resident.closed or resident.ended:
        return {"run_id": run_id, "stopped": False}
    try:
        await cancel_turn(rt, resident.tenant_id, run_id, "cancelled by operator (resident sub-agent)")
    except (NotMidTurn, RunFinished):
        return {"run_id": run_id, "stopped": False}
    return {"run_id": run_id, "stopped": True}


@router.post("/_resident/{run_id}/close", response_model=ResidentClosed, responses=errors(*AUTHED, 404))
async def post_close(run_id: str, rt: Rt, who: Who) -> dict[str, Any]:
    """Close a resident sub-agent: its run is cancelled (`closed by operator`). 404 `resident_not_found`."""
    return await close_resident(rt, who, run_id)


@router.post("/_resident/{run_id}/cancel", response_model=ResidentCancelled, responses=errors(*AUTHED, 404))
async def post_cancel(run_id: str, rt: Rt, who: Who) -> dict[str, Any]:
    """Stop a resident sub-agent's current turn; it parks for input again. 404 `resident_not_found`."""
    return await cancel_resident_turn(rt, who, run_id)
