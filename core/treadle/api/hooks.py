"""/v1/hooks: register, list and delete tool-use hooks (core/treadle/hooks/calls.py runs them)."""

from __future__ import annotations

import os
import re
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from fastapi import APIRouter, Depends, Response
from pydantic import BaseModel, ConfigDict, Field, field_validator

from treadle.api.deps import get_principal, get_runtime
from treadle.domain.ids import is_identifier
from treadle.errors import NotFound, ValidationFailed
from treadle.hooks.calls import DEFAULT_SECRET_ENV
from treadle.runtime import Runtime
from treadle.security.principal import Principal
from treadle.specs.fieldtypes import EnvVarName

router = APIRouter(prefix="/v1", tags=["hooks"])
Rt = Annotated[Runtime, Depends(get_runtime)]
Who = Annotated[Principal, Depends(get_principal)]
TOOL_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}\*?$|^[A-Za-z0-9_-]{0,63}\*$")


class HookRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    owner: str
    name: str
    phase: Literal["pre", "post"]
    agents: list[str] = Field(default_factory=list, max_length=64)
    tools: list[str] = Field(default_factory=list, max_length=64)
    callback_url: str = Field(max_length=2048)
    #: closed (the default): a hook that cannot answer denies the call (pre) or withholds its result (post)
    fail_mode: Literal["open", "closed"] = "closed"
    timeout_ms: int = Field(default=5000, ge=1, le=30_000)
    secret_env: EnvVarName | None = None

    @field_validator("owner", "name")
    @classmethod
    def _ident(cls, v: str) -> str:
        if not is_identifier(v):
            raise ValueError("must match [A-Za-z0-9_-]{1,128}")
        return v

    @field_validator("agents")
    @classmethod
    def _agents(cls, v: list[str]) -> list[str]:
        bad = [a for a in v if not is_identifier(a)]
        if bad:
            raise ValueError(f"not agent names: {bad}")
        return v

    @field_validator("tools")
    @classmethod
    def _tools(cls, v: list[str]) -> list[str]:
        bad = [t for t in v if not TOOL_PATTERN.match(t)]
        if bad:
            raise ValueError(f"not tool names or 'prefix*' patterns: {bad}")
        return v

    @field_validator("callback_url")
    @classmethod
    def _url(cls, v: str) -> str:
        parts = urlsplit(v)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an http(s) URL with a host")
        return v


@router.post("/hooks", status_code=201)
async def create_hook(body: HookRequest, rt: Rt, who: Who) -> dict[str, Any]:
    """Register a hook; 409 `hook_exists` for the same owner/name/phase, 422 `hook_secret_missing`
    when its signing secret variable is not set in treadle's environment."""
    secret_env = body.secret_env or DEFAULT_SECRET_ENV
    if not os.environ.get(secret_env):
        raise ValidationFailed(f"the hook's signing secret variable {secret_env} is not set",
                               code="hook_secret_missing")
    record = await rt.hooks.store.create(who.tenant_id, body.model_dump())
    rt.hooks.forget(who.tenant_id)
    return record.to_api()


@router.get("/hooks")
async def list_hooks(rt: Rt, who: Who) -> dict[str, Any]:
    return {"hooks": [h.to_api() for h in await rt.hooks.store.list(who.tenant_id)]}


@router.delete("/hooks/{hook_id}", status_code=204)
async def delete_hook(hook_id: str, rt: Rt, who: Who) -> Response:
    if not await rt.hooks.store.delete(who.tenant_id, hook_id):
        raise NotFound(f"hook {hook_id!r} not found", code="hook_not_found")
    rt.hooks.forget(who.tenant_id)
    return Response(status_code=204)
