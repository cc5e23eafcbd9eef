"""The operator's cross-tenant view and kill switch: `GET /v1/_admin/runs` lists unfinished runs
of every tenant (or one), `POST /v1/_admin/tenants/{tenant_id}/cancel` cancels all of a tenant's
unfinished runs (each with its sub-agent runs) — the stop for a runaway loop that burns money.
Only the operator (an admin of the default tenant) may call them."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, ConfigDict, Field

from treadle.api.deps import get_principal, get_runtime
from treadle.domain.ids import is_identifier
from treadle.errors import Forbidden, ValidationFailed
from treadle.runtime import Runtime
from treadle.security.principal import Principal

router = APIRouter(prefix="/v1/_admin", tags=["admin"])
tenant_router = APIRouter(prefix="/v1", tags=["runs"])
Rt = Annotated[Runtime, Depends(get_runtime)]
Who = Annotated[Principal, Depends(get_principal)]
#: how many runs one kill-switch call cancels at most (call again for the rest)
MAX_CANCEL = 5000


def _operator(who: Principal) -> None:
    if not (who.open_mode or who.is_operator):
        raise Forbidden("only the operator (an admin of the default tenant) acts across tenants",
                        scope="substrate:admin")


def _tenant(value: str) -> str:
    if not is_identifier(value) or len(value) > 64:
        raise ValidationFailed("tenant_id: must match [A-Za-z0-9_-]{1,64}")
    return value


@router.get("/runs")
async def unfinished_runs(rt: Rt, who: Who, tenant_id: str | None = None,
                          limit: Annotated[int, Query(ge=1, le=1000)] = 200) -> dict[str, Any]:
    """Unfinished runs (queued, running, waiting) of every tenant, or of `tenant_id`; oldest first."""
    _operator(who)
    runs = await rt.runs.list_unfinished(_tenant(tenant_id) if tenant_id else None, limit)
    return {"runs": [{"run_id": r.id, "tenant_id": r.tenant_id, "user_id": r.user_id, "agent": r.agent,
                      "status": r.status, "parent_run_id": r.parent_run_id, "created_at": r.created_at.isoformat()}
                     for r in runs], "count": len(runs)}


class CancelTenant(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str = Field(default="cancelled by the operator", max_length=500)


@router.post("/tenants/{tenant_id}/cancel")
async def cancel_tenant(tenant_id: str, rt: Rt, who: Who, body: CancelTenant | None = None) -> dict[str, Any]:
    """Cancel every unfinished run of the tenant (and its sub-agent runs) at its next safe point."""
    _operator(who)
    tenant = _tenant(tenant_id)
    reason = (body or CancelTenant()).reason
    runs = await rt.runs.list_unfinished(tenant, MAX_CANCEL)
    for run in runs:
        await rt.cancel_run(tenant, run.id, reason)
    return {"tenant_id": tenant, "cancel_requested": len(runs), "run_ids": [r.id for r in runs],
            "more": len(runs) == MAX_CANCEL}


@tenant_router.get("/_concurrency")
async def concurrency(rt: Rt, who: Who) -> dict[str, Any]:
    """The caller's tenant: runs holding a worker, queued for one (a fairness cap keeps them there),
    parked; per user; and the caps (0 = none)."""
    counts = await rt.runs.concurrency(who.tenant_id)
    return {"tenant_id": who.tenant_id, **counts,
            "caps": {"tenant_max_running": rt.settings.tenant_max_running,
                     "user_max_running": rt.settings.user_max_running}}
