"""GET /v1/_retention: what is kept how long (loomcycle's read-only report, RFC BM, in treadle's
terms) — the caller's tenant's effective days per class (finished runs with their transcripts,
channel messages, memory; null: kept forever), how many rows that policy would delete now, and the
sweeper's batch size. The operator (admin of the default tenant) also sees the default and every
tenant's overrides, and may focus one tenant (`?tenant=`); a tenant's caller naming another is 403.
The policy is the operator's `retention:` in treadle.yaml; enforcement: Runtime.enforce_retention."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from treadle.api.deps import Rt, Who
from treadle.api.errors import AUTHED, errors
from treadle.api.lazyroute import LazyAPIRoute
from treadle.api.tenantscope import focused_tenant
from treadle.config import RETENTION_CLASSES
from treadle.domain.ids import TENANT_PATTERN
from treadle.store.retention import RetentionStore
from treadle.wire.governance import RetentionReport

router = APIRouter(prefix="/v1", tags=["governance"], route_class=LazyAPIRoute)
#: rows one sweeper pass deletes per class and tenant rule at most
BATCH = 500


@router.get("/_retention", response_model=RetentionReport, response_model_exclude_unset=True,
            responses=errors(*AUTHED, 400))
async def retention_report(
    rt: Rt, who: Who, tenant: Annotated[str | None, Query(json_schema_extra={"pattern": TENANT_PATTERN})] = None,
) -> dict[str, Any]:
    """The tenant's retention: days per class, what it would delete now, the batch size."""
    tenant_id = focused_tenant(who, tenant, doing="reports on") or who.tenant_id
    rules = rt.config.retention
    policy = rules.policy(tenant_id)
    out: dict[str, Any] = {"tenant_id": tenant_id, "policy": policy,
                           "purgeable": await RetentionStore(rt.pool).purgeable(tenant_id, policy), "batch": BATCH}
    if who.open_mode or who.is_operator:
        out["default"] = {c: rules.default(c) for c in RETENTION_CLASSES}
        out["tenants"] = {t: rules.policy(t) for t in rules.tenants}
    return out
