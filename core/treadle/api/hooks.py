"""/v1/hooks: register, list and delete tool-use hooks (core/treadle/hooks/calls.py runs them)."""

from __future__ import annotations

import os
from typing import Any

from fastapi import APIRouter, Response

from treadle.api.deps import Rt, Who
from treadle.api.errors import AUTHED, BODY, errors
from treadle.api.lazyroute import LazyAPIRoute
from treadle.errors import NotFound, ValidationFailed
from treadle.hooks.calls import DEFAULT_SECRET_ENV
from treadle.wire import Hook, HookList, HookRequest

router = APIRouter(prefix="/v1", tags=["hooks"], route_class=LazyAPIRoute)


@router.post("/hooks", status_code=201, response_model=Hook, response_model_exclude_unset=True,
             responses=errors(*BODY, 409))
async def create_hook(body: HookRequest, rt: Rt, who: Who) -> dict[str, Any]:
    """Register a hook; 409 `hook_exists` for the same owner/name/phase, 422 `hook_secret_missing`
    when its signing secret variable is not set in treadle's environment (a `secret_credential`,
    the tenant's CredentialDef by name, is resolved at each call instead)."""
    secret_env = body.secret_env or DEFAULT_SECRET_ENV
    if body.secret_credential is None and not os.environ.get(secret_env):
        raise ValidationFailed(f"the hook's signing secret variable {secret_env} is not set",
                               code="hook_secret_missing")
    record = await rt.hooks.store.create(who.tenant_id, body.model_dump())
    rt.hooks.forget(who.tenant_id)
    return record.to_api()


@router.get("/hooks", response_model=HookList, response_model_exclude_unset=True, responses=errors(*AUTHED))
async def list_hooks(rt: Rt, who: Who) -> dict[str, Any]:
    return {"hooks": [h.to_api() for h in await rt.hooks.store.list(who.tenant_id)]}


@router.delete("/hooks/{hook_id}", status_code=204, response_class=Response, responses=errors(*AUTHED, 404))
async def delete_hook(hook_id: str, rt: Rt, who: Who) -> Response:
    if not await rt.hooks.store.delete(who.tenant_id, hook_id):
        raise NotFound(f"hook {hook_id!r} not found", code="hook_not_found")
    rt.hooks.forget(who.tenant_id)
    return Response(status_code=204)
