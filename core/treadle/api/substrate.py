"""Substrate definitions and evaluations (bearer; tenant from the principal, never the body).

    POST /v1/_agentdef, /v1/_skilldef, /v1/_evaluation    op dispatch; body = the tool's input JSON,
                                                         answer = the tool's JSON result
    GET  /v1/_agentdef/names, /v1/_skilldef/names         names new runs can use (yaml + promoted)

Refusals answer 422 `{"code": "tool_refused", "error": ...}`; unknown defs/runs 404 (also for
another tenant's); a create that clashes with a different active version 409.
"""

from __future__ import annotations

from fastapi import APIRouter

from treadle.api.defroutes import add_def_routes, add_op_route
from treadle.api.lazyroute import LazyAPIRoute
from treadle.wire import EvaluationOp

router = APIRouter(prefix="/v1", tags=["substrate"], route_class=LazyAPIRoute)
add_def_routes(router, "/_agentdef", lambda rt: rt.substrate.agents)
add_def_routes(router, "/_skilldef", lambda rt: rt.substrate.skills)
add_def_routes(router, "/_volumedef", lambda rt: rt.volumedefs)
add_op_route(router, "/_evaluation", lambda rt: rt.substrate.evaluations, EvaluationOp)
