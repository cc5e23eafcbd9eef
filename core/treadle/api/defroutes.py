"""The HTTP twin of a *Def tool: `POST /v1/_<kind>def` (body = the tool's op input, answer = its
JSON result) and `GET /v1/_<kind>def/names` (the names new runs or deliveries use), for every kind
of the def lifecycle (treadle/defs). The bearer's principal sets the tenant, never the body; there
is no gate (the operator may do every op)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel

from treadle.api.deps import Rt, Who
from treadle.api.errors import AUTHED, BODY, errors
from treadle.api.openapi import body_doc
from treadle.defs.lifecycle import DefLifecycle
from treadle.errors import BadRequest
from treadle.ports import OpService
from treadle.runtime import Runtime
from treadle.wire import DefOp, Names, OpResult

#: the kind's own fields ride along in the op input
OPEN_FIELDS = "The kind's own fields (the *Def tool's input) ride along; the kind refuses those it does not know."


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


def add_op_route(router: APIRouter, path: str, family_of: Callable[[Runtime], OpService],
                 body: type[BaseModel] = DefOp) -> None:
    """`POST {path}`: the op input in, the op's answer out."""

    async def op(request: Request, rt: Rt, who: Who) -> dict[str, Any]:
        return await family_of(rt).dispatch(who.tenant_id, await op_body(request))

    doc = body_doc(body, open_fields=OPEN_FIELDS if body is DefOp else None)
    router.add_api_route(path, op, methods=["POST"], name=path.strip("/_"), response_model=OpResult,
                         response_model_exclude_unset=True,
                         openapi_extra=doc, responses=errors(*BODY, 404, 409))


def add_def_routes(router: APIRouter, path: str, family_of: Callable[[Runtime], DefLifecycle]) -> None:
    """`POST {path}` and `GET {path}/names`."""
    add_op_route(router, path, family_of)

    async def names(rt: Rt, who: Who) -> dict[str, Any]:
        return {"names": await family_of(rt).active_names(who.tenant_id)}

    router.add_api_route(f"{path}/names", names, methods=["GET"], name=f"{path.strip('/_')}_names",
                         response_model=Names, response_model_exclude_unset=True, responses=errors(*AUTHED))
