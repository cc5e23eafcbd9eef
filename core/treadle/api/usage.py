"""GET /v1/_usage: token usage and cost as recorded (store/usage.py), grouped — loomcycle's
report (`internal/api/http/usage_report.go`) with treadle's dimensions: tenant, user, agent, def
(AgentDef id), provider, model, day. `format=csv` (or `Accept: text/csv`) answers CSV.

A tenant's caller sees only its tenant (`?tenant=` is the operator's focus; a tenant caller naming
another tenant is refused); `from`/`to` are RFC 3339 instants or dates, taken at UTC-day
granularity (the roll-up is per day); an unknown dimension is a 400, never dropped."""

from __future__ import annotations

import csv
import datetime as dt
import io
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response

from treadle.api.deps import Rt, Who
from treadle.api.errors import AUTHED, errors
from treadle.api.lazyroute import LazyAPIRoute
from treadle.api.tenantscope import focused_tenant
from treadle.errors import BadRequest
from treadle.store.usage import DIMENSIONS

router = APIRouter(prefix="/v1", tags=["governance"], route_class=LazyAPIRoute)

FIELDS = ("tenant_id", "user_id", "agent", "def_id", "provider", "model", "day", "input_tokens", "output_tokens",
          "cache_creation_tokens", "cache_read_tokens", "cost", "currency", "call_count", "unpriced_calls")


def _day(name: str, value: str | None) -> dt.date | None:
    if not value:
        return None
    try:
        if len(value) == 10:
            return dt.date.fromisoformat(value)
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(dt.UTC).date()
    except ValueError:
        raise BadRequest(f"{name} must be RFC 3339 (or YYYY-MM-DD): {value!r}") from None


@router.get("/_usage", responses=errors(*AUTHED, 400))
async def usage_report(
    request: Request, rt: Rt, who: Who,
    group_by: Annotated[str, Query()] = "tenant",
    from_: Annotated[str | None, Query(alias="from")] = None,
    to: Annotated[str | None, Query()] = None,
    tenant: str | None = None, user: str | None = None, agent: str | None = None,
    format: Annotated[str | None, Query(pattern="^(json|csv)$")] = None,
) -> Response:
    """Usage totals (tokens, cost per currency, calls, unpriced calls) grouped by `group_by`."""
    dims = [d.strip() for d in group_by.split(",") if d.strip()]
    for d in dims:
        if d not in DIMENSIONS:
            raise BadRequest(f"unknown group_by dimension: {d} (allowed: {','.join(DIMENSIONS)})")
    tenant_id = focused_tenant(who, tenant, doing="reports on")  # an operator's None: across tenants
    since, until = _day("from", from_), _day("to", to)
    filters = {k: v for k, v in (("user", user), ("agent", agent)) if v is not None}
    rows = await rt.usage.report(tenant_id=tenant_id, group_by=dims, since=since, until=until, filters=filters)
    out = [_wire(r) for r in rows]
    if format == "csv" or (format is None and "text/csv" in request.headers.get("accept", "")):
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=[f for f in FIELDS if f in {*map(DIMENSIONS.get, dims)}
                                                 or f not in DIMENSIONS.values()], extrasaction="ignore")
        writer.writeheader()
        writer.writerows(out)
        return Response(buf.getvalue(), media_type="text/csv")
    body: dict[str, Any] = {"group_by": dims, "rows": out}
    if since:
        body["from"] = since.isoformat()
    if until:
        body["to"] = until.isoformat()
    return JSONResponse(body)


def _wire(row: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in row.items() if k != "calls"}
    out["call_count"] = row["calls"]
    return out
