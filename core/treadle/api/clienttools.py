"""Application tools over HTTP: what a caller declares on `POST /v1/runs` (`client_tools`) and
`POST /v1/runs/{run_id}/tool_results`, the answer to a call that parked its run
(builtins/client.py)."""

from __future__ import annotations

import re
from typing import Annotated, Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field, field_validator

from treadle.api.deps import get_principal, get_runtime
from treadle.builtins.client import MAX_CLIENT_TOOLS, MAX_TIMEOUT_S
from treadle.errors import ValidationFailed
from treadle.runtime import Runtime
from treadle.security.principal import Principal
from treadle.store.clienttools import client_tool_key

router = APIRouter(prefix="/v1", tags=["runs"])
Rt = Annotated[Runtime, Depends(get_runtime)]
Who = Annotated[Principal, Depends(get_principal)]

#: what every vendor accepts as a tool name (Anthropic's rule is the strictest)
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_RESULT_CHARS = 256 * 1024


class ClientToolSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    description: str = Field(default="", max_length=4096)
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not TOOL_NAME.match(v):
            raise ValueError("must match [A-Za-z0-9_-]{1,64}")
        return v

    @field_validator("input_schema")
    @classmethod
    def _object_schema(cls, v: dict[str, Any]) -> dict[str, Any]:
        if v.get("type", "object") != "object":
            raise ValueError('must be a JSON schema of type "object"')
        return {"type": "object", **v}


ClientTools = Annotated[list[ClientToolSpec], Field(max_length=MAX_CLIENT_TOOLS)]
ClientToolTimeout = Annotated[float, Field(gt=0, le=MAX_TIMEOUT_S)]


def client_tool_specs(
    rt: Runtime, tools: list[ClientToolSpec] | None, timeout_s: float | None
) -> list[dict[str, Any]] | None:
    """The declared tools as stored on the run; a name that repeats or that a built-in tool has
    is refused (the model must never confuse the two), and so is a timeout without tools."""
    if not tools:
        if timeout_s is not None:
            raise ValidationFailed("client_tool_timeout_seconds applies to client_tools, and none are declared",
                                   code="client_tool_timeout_without_tools")
        return None
    names = [t.name for t in tools]
    clash = sorted({n for n in names if names.count(n) > 1} | (set(names) & set(rt.registry.names())))
    if clash:
        raise ValidationFailed(f"client_tools: {', '.join(clash)} repeat or name built-in tools",
                               code="client_tool_name_taken")
    return [t.model_dump() for t in tools]


class ToolResultRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tool_use_id: str = Field(min_length=1, max_length=256)
    content: str = Field(max_length=MAX_RESULT_CHARS)
    is_error: bool = False


@router.post("/runs/{run_id}/tool_results")
async def post_tool_result(run_id: str, body: ToolResultRequest, rt: Rt, who: Who) -> dict[str, Any]:
    """Answer an application tool call the run is waiting on; the run continues at once. 404
    `tool_call_not_found` (no such call in this run), 409 `tool_call_not_waiting` (answered already,
    or it timed out)."""
    await rt.engine.tools.client_results.answer(who.tenant_id, run_id, body.tool_use_id, body.content, body.is_error)
    woke = await rt.poke(who.tenant_id, [client_tool_key(run_id, body.tool_use_id)])
    return {"run_id": run_id, "tool_use_id": body.tool_use_id, "accepted": True, "woke": woke}
