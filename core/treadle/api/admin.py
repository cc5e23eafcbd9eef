"""The operator's cross-tenant view and kill switch: `GET /v1/_admin/runs` lists unfinished runs
of every tenant (or one), `POST /v1/_admin/tenants/{tenant_id}/cancel` cancels all of a tenant's
unfinished runs (each with its sub-agent runs) — the stop for a runaway loop that burns money.
Only the operator (an admin of the default tenant) may call them."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query
from fastapi.responses import StreamingResponse

from treadle.api.deps import Rt, Who
from treadle.api.errors import AUTHED, BODY, errors
from treadle.api.lazyroute import LazyAPIRoute
from treadle.domain.ids import TENANT_PATTERN, is_identifier
from treadle.errors import Forbidden, ValidationFailed
from treadle.security.principal import Principal
from treadle.store.tenants import TenantData
from treadle.wire import AdminRuns, CancelTenantRequest, Concurrency, TenantCancelled, TenantErased

router = APIRouter(prefix="/v1/_admin", tags=["admin"], route_class=LazyAPIRoute)
tenant_router = APIRouter(prefix="/v1", tags=["runs"], route_class=LazyAPIRoute)
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


@router.get("/runs", response_model=AdminRuns, response_model_exclude_unset=True, responses=errors(*AUTHED))
async def unfinished_runs(rt: Rt, who: Who, tenant_id: str | None = None,
                          limit: Annotated[int, Query(ge=1, le=1000)] = 200) -> dict[str, Any]:
    """Unfinished runs (queued, running, waiting) of every tenant, or of `tenant_id`; oldest first."""
    _operator(who)
    runs = await rt.runs.list_unfinished(_tenant(tenant_id) if tenant_id else None, limit)
    return {"runs": [{"run_id": r.id, "tenant_id": r.tenant_id, "user_id": r.user_id, "agent": r.agent,
                      "status": r.status, "parent_run_id": r.parent_run_id, "created_at": r.created_at.isoformat()}
                     for r in runs], "count": len(runs)}


@router.post("/tenants/{tenant_id}/cancel", response_model=TenantCancelled, response_model_exclude_unset=True,
             responses=errors(*BODY))
async def cancel_tenant(
    tenant_id: Annotated[str, Path(json_schema_extra={"pattern": TENANT_PATTERN})], rt: Rt, who: Who,
    body: CancelTenantRequest | None = None,
) -> dict[str, Any]:
    """Cancel every unfinished run of the tenant (and its sub-agent runs) at its next safe point."""
    _operator(who)
    tenant = _tenant(tenant_id)
    reason = (body or CancelTenantRequest()).reason
    runs = await rt.runs.list_unfinished(tenant, MAX_CANCEL)
    for run in runs:
        await rt.cancel_run(tenant, run.id, reason)
    return {"tenant_id": tenant, "cancel_requested": len(runs), "run_ids": [r.id for r in runs],
            "more": len(runs) == MAX_CANCEL}


@tenant_router.get("/_concurrency", response_model=Concurrency, response_model_exclude_unset=True,
                   responses=errors(*AUTHED))
async def concurrency(rt: Rt, who: Who) -> dict[str, Any]:
    """The caller's tenant: runs holding a worker, queued for one (a fairness cap keeps them there),
    parked; per user; and the caps (0 = none)."""
    counts = await rt.runs.concurrency(who.tenant_id)
    return {"tenant_id": who.tenant_id, **counts,
            "caps": {"tenant_max_running": rt.settings.tenant_max_running,
                     "user_max_running": rt.settings.user_max_running}}


@router.get("/tenants/{tenant_id}/export", response_class=StreamingResponse,
            responses={200: {"content": {"application/x-ndjson": {"schema": {"type": "string"}}},
                             "description": 'JSON lines `{"table", "row"}`'}, **errors(*AUTHED)})
async def export_tenant(tenant_id: str, rt: Rt, who: Who) -> StreamingResponse:
    """Every row of the tenant, as JSON lines `{"table", "row"}` (one consistent snapshot; token
    hashes and sealed credentials are left out); then, where SQL memory is on, one line per SQL
    memory scope `{"table": "sql_memory", "row": {tenant_id, scope, scope_id, pre, data,
    sequences, post, not_carried}}` — its schema and rows, as a snapshot carries them."""
    _operator(who)
    data = TenantData(rt.pool)
    tenant = _tenant(tenant_id)
    sql = rt.sql_snapshots

    async def lines() -> Any:
        async for item in data.export(tenant):
            yield json.dumps(item, default=str) + "\n"
        for scope in await sql.capture(tenant) if sql is not None else []:
            yield json.dumps({"table": "sql_memory", "row": scope}) + "\n"

    return StreamingResponse(lines(), media_type="application/x-ndjson")


@router.delete("/tenants/{tenant_id}", response_model=TenantErased, response_model_exclude_unset=True,
               responses=errors(*AUTHED))
async def erase_tenant(tenant_id: str, rt: Rt, who: Who, confirm: str | None = None) -> dict[str, Any]:
    """Erase every row of the tenant (runs and their transcripts, memory, channels, defs, triggers,
    tokens …) in one transaction. `?confirm=<tenant_id>` is required."""
    _operator(who)
    tenant = _tenant(tenant_id)
    if confirm != tenant:
        raise ValidationFailed(f"erasing a tenant cannot be undone: repeat its id as ?confirm={tenant}")
    for run in await rt.runs.list_unfinished(tenant, MAX_CANCEL):  # nothing of it keeps running
        await rt.cancel_run(tenant, run.id, "tenant erased")
    deleted = await TenantData(rt.pool).erase(tenant)
    if rt.sql_memory is not None:  # its SQL memory scopes (schemas and roles in their own database)
        scopes = await rt.sql_memory.scopes(tenant)
        for key in scopes:
            await rt.sql_memory.drop_scope(key)
        if scopes:
            deleted["sql_memory_scopes"] = len(scopes)
    rt.auth_generation += 1  # its tokens are gone: no cached principal may outlive them here
    return {"tenant_id": tenant, "deleted": deleted}
