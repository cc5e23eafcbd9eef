"""Application tools: tools a caller declares on `POST /v1/runs` (`client_tools`) and answers
itself, without writing a server.

When the model calls one, the call parks (status `waiting`, a `tool_pending` event carrying the
call) and holds no worker; the application answers with `POST /v1/runs/{id}/tool_results`
(`tool_use_id`, `content`, `is_error`), which stores the answer and pokes the call's wait key,
and the re-invoked call returns it. A call nobody answers within the run's
`client_tool_timeout_seconds` is answered with an error. Parking and answering are database
writes, so the tool is transactional: a crash between park and answer loses nothing.
"""

from __future__ import annotations

from typing import Any

from treadle.domain.events import EventType
from treadle.store.clienttools import client_tool_key
from treadle.tools.base import Park, ToolContext, ToolEffects, ToolResult

DEFAULT_TIMEOUT_S = 600.0
MAX_TIMEOUT_S = 7 * 24 * 3600.0
MAX_CLIENT_TOOLS = 64


class ClientTool:
    effects: ToolEffects = "transactional"  # park and read the answer: both in the step's transaction

    def __init__(self, name: str, description: str, input_schema: dict[str, Any], timeout_s: float) -> None:
        self.name = name
        self.description = description
        self.input_schema = input_schema
        self.timeout_s = timeout_s

    @classmethod
    def from_spec(cls, spec: dict[str, Any], timeout_s: float | None) -> ClientTool:
        return cls(str(spec["name"]), str(spec.get("description") or ""), dict(spec.get("input_schema") or {}),
                   timeout_s if timeout_s is not None else DEFAULT_TIMEOUT_S)

    async def invoke(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult | Park:
        key = client_tool_key(ctx.run_id, ctx.tool_use_id)
        version = await ctx.waits.version(ctx.tenant_id, key)  # before looking for the answer
        answer = await ctx.services.client_results.get(ctx.run_id, ctx.tool_use_id)
        if answer is not None:
            return ToolResult(answer.content, is_error=answer.is_error)
        if ctx.deadline_passed():
            return ToolResult(f"{self.name}: the application did not answer within {self.timeout_s:g} s",
                              is_error=True)
        park = Park("client_tool", {key: version}, deadline_s=self.timeout_s,
                    extra={"tool": self.name, "timeout_s": self.timeout_s})
        if ctx.resume is None:
            park.events.append((EventType.TOOL_PENDING, {
                "tool_use": {"id": ctx.tool_use_id, "name": self.name, "input": args},
                "timeout_s": self.timeout_s,
                "answer": f"POST /v1/runs/{ctx.run_id}/tool_results",
            }))
        return park
