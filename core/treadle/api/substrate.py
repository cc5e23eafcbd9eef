"""Substrate definitions and evaluations (bearer; tenant from the principal, never the body).

    POST /v1/_agentdef, /v1/_skilldef, /v1/_evaluation    op dispatch; body = the tool's input JSON,
                                                         answer = the tool's JSON result
    GET  /v1/_agentdef/names, /v1/_skilldef/names         names new runs can use (yaml + promoted)

Refusals answer 422 `{"code": "tool_refused", "error": ...}`; unknown defs/runs 404 (also for
another tenant's); a create that clashes with a different active version 409.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request

from treadle.api.deps import get_principal, get_runtime
from treadle.errors import BadRequest
from treadle.runtime import Runtime
from treadle.security.principal import Principal
from treadle.substrate import substrate
from treadle.substrate.family import SubstrateFamily

router = APIRouter(prefix="/v1", tags=["substrate"])
Rt = Annotated[Runtime, Depends(get_runtime)]
Who = Annotated[Principal, Depends(get_principal)]


async def op_body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw.strip():
        raise BadRequest('the body is the op input: {"op": ..., ...}')
    try:
        body = json.loads(raw)
    except ValueError:
        raise BadRequest("the body is not valid JSON") from None
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    return body


async def _names(family: SubstrateFamily, tenant: str) -> dict[str, Any]:
    listing = await family.op_list(tenant, {"op": "list"}, None, None)
    names = {d["name"] for d in listing["defs"] if d["active"]} | {s["name"] for s in listing["static"]}
    return {"names": sorted(names)}


@router.post("/_agentdef")
async def agentdef(request: Request, rt: Rt, who: Who) -> dict[str, Any]:
    return await substrate(rt).agents.dispatch(who.tenant_id, await op_body(request))


@router.get("/_agentdef/names")
async def agentdef_names(rt: Rt, who: Who) -> dict[str, Any]:
    return await _names(substrate(rt).agents, who.tenant_id)


@router.post("/_skilldef")
async def skilldef(request: Request, rt: Rt, who: Who) -> dict[str, Any]:
    return await substrate(rt).skills.dispatch(who.tenant_id, await op_body(request))


@router.get("/_skilldef/names")
async def skilldef_names(rt: Rt, who: Who) -> dict[str, Any]:
    return await _names(substrate(rt).skills, who.tenant_id)


@router.post("/_evaluation")
async def evaluation(request: Request, rt: Rt, who: Who) -> dict[str, Any]:
    return await substrate(rt).evaluations.dispatch(who.tenant_id, await op_body(request))
