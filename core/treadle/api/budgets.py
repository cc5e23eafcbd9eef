"""GET|PUT|DELETE /v1/_limits: budgets (issue 42 item 2) — loomcycle's `/v1/_limits`
(`internal/api/http/limits_admin.go`, RFC AW) with treadle's agent scope, a day window and a cost
metric. Each row answers with the usage its window has counted (`used`).

Tenant confinement as loomcycle's `limits.ResolveWrite`: the operator (an admin of the default
tenant, or open mode) sees every tenant (`?tenant=` focuses one) and writes any; a tenant's caller
sees and writes its own tenant only — a body or query naming another tenant is 403, never
rewritten. `scope=tenant` takes no `scope_id`; `user` and `agent` require one (400 otherwise).

What a limit does (governance/budgets.py): a hard limit refuses a new run with 429
`token_limit_exceeded` (loomcycle's body) and ends a running one at its next iteration boundary
(stop reason `budget_exceeded`); a soft one records a `limit` event once per run. A hard limit of
0 on the tenant scope is the kill switch's "refuse new runs until lifted" (DELETE lifts it)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response

from treadle.api.deps import Rt, Who
from treadle.api.errors import AUTHED, BODY, errors
from treadle.api.lazyroute import LazyAPIRoute
from treadle.domain.ids import is_identifier
from treadle.errors import BadRequest, Forbidden, NotFound
from treadle.governance.budgets import Limit
from treadle.security.principal import Principal
from treadle.store import scope as tenant_scope
from treadle.wire.governance import LimitList, LimitRequest, LimitRow

router = APIRouter(prefix="/v1", tags=["governance"], route_class=LazyAPIRoute)
SCOPES = ("tenant", "user", "agent")
WINDOWS = ("month", "day")
METRICS = ("tokens", "cost")


def _tenant_for(who: Principal, named: str | None) -> tuple[str | None, bool]:
    """(tenant, operator): the tenant a call acts on — the operator may name any (None: all, for
    a read), a tenant's caller only its own."""
    if who.open_mode or who.is_operator:
        if named is not None and (not is_identifier(named) or len(named) > 64):
            raise BadRequest("tenant: must match [A-Za-z0-9_-]{1,64}")
        tenant_scope.unbind()
        return named, True
    if named not in (None, who.tenant_id):
        raise Forbidden("a tenant's caller manages budgets in its own tenant only", scope="substrate:admin")
    return who.tenant_id, False


def _scope_id(scope: str, scope_id: str) -> str:
    if scope not in SCOPES:
        raise BadRequest(f"scope must be one of: {', '.join(SCOPES)}")
    if scope == "tenant" and scope_id:
        raise BadRequest("scope_id must be empty for scope=tenant")
    if scope != "tenant" and not scope_id:
        raise BadRequest(f"scope_id (the {'user id' if scope == 'user' else 'agent name'}) is required"
                         f" for scope={scope}")
    return scope_id


def _row(r: dict[str, Any]) -> dict[str, Any]:
    out = {k: r[k] for k in ("tenant_id", "scope", "scope_id", "soft_limit", "hard_limit", "window", "metric")}
    out["used"] = float(r["used"])
    if r["metric"] == "cost":
        out["currency"] = r["currency"]
    if r.get("updated_at") is not None:
        out["updated_at"] = r["updated_at"].isoformat()
    if r.get("updated_by"):
        out["updated_by"] = r["updated_by"]
    return {k: v for k, v in out.items() if v is not None}


@router.get("/_limits", response_model=LimitList, response_model_exclude_unset=True, responses=errors(*AUTHED, 400))
async def list_limits(rt: Rt, who: Who, tenant: str | None = None) -> dict[str, Any]:
    """The budgets the caller may see, each with the usage its window has counted so far."""
    tenant_id, _ = _tenant_for(who, tenant)
    return {"limits": [_row(r) for r in await rt.limits.list(tenant_id)]}


@router.put("/_limits", response_model=LimitRow, response_model_exclude_unset=True, responses=errors(*BODY))
async def put_limit(body: LimitRequest, rt: Rt, who: Who) -> dict[str, Any]:
    """Upsert one budget (tenant, scope, scope_id, window, metric); it binds at once here and
    within a second in every other process."""
    tenant_id, _ = _tenant_for(who, body.tenant_id)
    tenant_id = tenant_id or who.tenant_id
    if body.soft_limit is None and body.hard_limit is None:
        raise BadRequest("a budget needs a soft_limit, a hard_limit or both (DELETE removes one)")
    limit = Limit(tenant_id, body.scope, _scope_id(body.scope, body.scope_id), body.soft_limit, body.hard_limit,
                  body.window, body.metric, body.currency)
    await rt.limits.put(limit, updated_by=who.subject)
    for r in await rt.limits.list(tenant_id):
        if (r["scope"], r["scope_id"], r["window"], r["metric"]) == (limit.scope, limit.scope_id, limit.window,
                                                                      limit.metric):
            return _row(r)
    raise BadRequest("the budget was removed meanwhile")  # a concurrent DELETE won


@router.delete("/_limits", status_code=204, response_class=Response, responses=errors(*AUTHED, 400, 404))
async def delete_limit(rt: Rt, who: Who, scope: str, scope_id: str = "", tenant: str | None = None,
                       window: str = "month", metric: str = "tokens") -> Response:
    """Remove one budget (that scope is unlimited again)."""
    tenant_id, _ = _tenant_for(who, tenant)
    tenant_id = tenant_id or who.tenant_id
    if window not in WINDOWS or metric not in METRICS:
        raise BadRequest(f"window must be one of {', '.join(WINDOWS)}; metric one of {', '.join(METRICS)}")
    if not await rt.limits.delete(tenant_id, scope, _scope_id(scope, scope_id), window, metric):
        raise NotFound(f"no {window} {metric} budget for {scope} {scope_id or tenant_id}")
    return Response(status_code=204)
