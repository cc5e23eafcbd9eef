"""Application tools over HTTP: what a caller declares on `POST /v1/runs` (`client_tools`) and
`POST /v1/runs/{run_id}/tool_results`, the answer to a call that parked its run
(builtins/client.py)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from treadle.api.deps import Rt, Who
from treadle.api.errors import BODY, errors
from treadle.api.lazyroute import LazyAPIRoute
from treadle.errors import ValidationFailed
from treadle.runtime import Runtime
from treadle.store.clienttools import client_tool_key
from treadle.wire import ClientToolSpec, ToolResultAccepted, ToolResultRequest
from treadle.wire.runs import TOOL_NAME, ClientTools, ClientToolTimeout

router = APIRouter(prefix="/v1", tags=["runs"], route_class=LazyAPIRoute)

__all__ = ["TOOL_NAME", "ClientToolSpec", "ClientToolTimeout", "ClientTools", "ToolResultRequest",
           "client_tool_specs", "router"]


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


@router.post("/runs/{run_id}/tool_results", response_model=ToolResultAccepted, response_model_exclude_unset=True,
             responses=errors(*BODY, 404, 409))
async def post_tool_result(run_id: str, body: ToolResultRequest, rt: Rt, who: Who) -> dict[str, Any]:
    """Answer an application tool call the run is waiting on; the run continues at once. 404
    `tool_call_not_found` (no such call in this run), 409 `tool_call_not_waiting` (answered already
    — differently, or the run has taken the answer — or it timed out). The same answer again while
    the run has not taken it is a safe retry: 200, and it wakes the run."""
    await rt.engine.tools.client_results.answer(who.tenant_id, run_id, body.tool_use_id, body.content, body.is_error)
    woke = await rt.poke(who.tenant_id, [client_tool_key(run_id, body.tool_use_id)])
    return {"run_id": run_id, "tool_use_id": body.tool_use_id, "accepted": True, "woke": woke}
