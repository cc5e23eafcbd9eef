"""`POST /v1/_operatortokendef` (OperatorTokenDef ops: create, rotate, retire, get, list) and
`GET /v1/_whoami`. Tokens are minted for the caller's tenant, or — for the operator (an admin of
the default tenant) — for the tenant named by `tenant_id` in the op input."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from treadle.api.auth import principal_view
from treadle.api.defroutes import OPEN_FIELDS, op_body
from treadle.api.deps import Rt, Who
from treadle.api.errors import AUTHED, BODY, errors
from treadle.api.lazyroute import LazyAPIRoute
from treadle.api.openapi import body_doc
from treadle.domain.ids import is_identifier
from treadle.errors import Forbidden, ValidationFailed
from treadle.runtime import Runtime
from treadle.security.principal import Principal
from treadle.wire import DefOp, Names, OpResult, Whoami

router = APIRouter(prefix="/v1", tags=["auth"], route_class=LazyAPIRoute)


@router.post("/_operatortokendef", response_model=OpResult, response_model_exclude_unset=True,
             openapi_extra=body_doc(DefOp, open_fields=OPEN_FIELDS),
             responses=errors(*BODY, 404, 409))
async def operator_token_op(request: Request, rt: Rt, who: Who) -> dict[str, Any]:
    return await operator_token_dispatch(rt, who, await op_body(request))


async def operator_token_dispatch(rt: Runtime, who: Principal, body: dict[str, Any]) -> dict[str, Any]:
    """An OperatorTokenDef op for the caller's tenant, or (an operator's) `tenant_id`'s."""
    body = dict(body)
    tenant = body.pop("tenant_id", None) or who.tenant_id
    if not isinstance(tenant, str) or not is_identifier(tenant) or len(tenant) > 64:
        raise ValidationFailed("tenant_id: must match [A-Za-z0-9_-]{1,64}")
    if tenant != who.tenant_id and not (who.is_operator or who.open_mode):
        raise Forbidden("only an operator (an admin of the default tenant) may manage another tenant's tokens",
                        scope="substrate:admin")
    out: dict[str, Any] = await rt.operator_tokens.dispatch(tenant, body)
    return out


@router.get("/_operatortokendef/names", response_model=Names, response_model_exclude_unset=True,
            responses=errors(*AUTHED))
async def operator_token_names(rt: Rt, who: Who) -> dict[str, Any]:
    return {"names": await rt.operator_tokens.active_names(who.tenant_id)}


@router.get("/_whoami", response_model=Whoami, response_model_exclude_unset=True, responses=errors(*AUTHED))
async def whoami(who: Who) -> dict[str, Any]:
    """The principal this bearer acts as (the same answer as loomcycle's `GET /v1/_me`)."""
    return principal_view(who)
