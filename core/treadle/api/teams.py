"""Team workflows over HTTP (bearer; tenant from the principal, never the body) — loomcycle's routes:

    POST /v1/_teamdef         op dispatch (create, fork, get, list, retire, delete, promote, verify,
                              render_diagram, run); body = the TeamDef tool's input, answer = its result
    GET  /v1/_teamdef/names   every team of the tenant with its version roll-up (loomcycle's
                              TeamNameSummary: name, version_count, active_def_id, latest_version, …)

`run` answers once the team run ended (or `wait: false`: at once with its `run_id`).
Invalid graphs answer 422 with the class's code (teams/graph.py INVALID_CODES).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from treadle.api.defroutes import add_op_route
from treadle.api.deps import Rt, Who
from treadle.api.errors import AUTHED, errors
from treadle.api.lazyroute import LazyAPIRoute
from treadle.wire import OpResult

router = APIRouter(prefix="/v1", tags=["teams"], route_class=LazyAPIRoute)
add_op_route(router, "/_teamdef", lambda rt: rt.teamdefs)


@router.get("/_teamdef/names", response_model=OpResult, responses=errors(*AUTHED))
async def teamdef_names(rt: Rt, who: Who) -> dict[str, Any]:
    records = await rt.teamdefs.defs.list(who.tenant_id, "team", include_retired=True, limit=100_000)
    by_name: dict[str, list[Any]] = {}
    for r in records:
        by_name.setdefault(r.name, []).append(r)
    names = []
    for name in sorted(by_name):
        versions = by_name[name]
        active = next((r for r in versions if r.active), None)
        live = [r for r in versions if r.status == "active"]
        names.append({
            "name": name, "tenant_id": who.tenant_id, "version_count": len(versions),
            "active_def_id": active.def_id if active else "", "latest_version": max(r.version for r in versions),
            "last_updated": max(r.created_at for r in versions).isoformat(), "live_version_count": len(live),
            "active_retired": False if active else bool(versions),
        })
    for name in rt.teamdefs.static_names():  # treadle.yaml's teams no version overrides
        if name not in by_name:
            names.append({"name": name, "tenant_id": who.tenant_id, "version_count": 0, "active_def_id": "",
                          "latest_version": 0, "live_version_count": 0, "active_retired": False,
                          "source": "yaml"})
    return {"names": sorted(names, key=lambda n: n["name"])}
