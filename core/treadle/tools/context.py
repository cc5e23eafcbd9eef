"""Built-in `Context`: facts an agent may ask about itself and the world (read-only)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from treadle.errors import ToolError
from treadle.tools.base import Park, ToolContext, ToolResult

OPS = ("time", "self")


class ContextTool:
    name = "Context"
    description = "Read-only facts. op: time (current UTC time) | self (this agent, run, model, iteration)."
    input_schema: dict[str, Any] = {
        "type": "object",
        "properties": {"op": {"type": "string", "enum": list(OPS)}},
        "required": ["op"],
    }

    async def invoke(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult | Park:
        op = args.get("op")
        if op == "time":
            now = ctx.now or datetime.now(UTC)
            return ToolResult.json({"now": now.isoformat(), "unix": now.timestamp(), "timezone": "UTC"})
        if op == "self":
            return ToolResult.json(
                {
                    "agent": ctx.agent,
                    "run_id": ctx.run_id,
                    "user_id": ctx.user_id,
                    "tenant_id": ctx.tenant_id,
                    "model": ctx.model,
                    "provider": ctx.provider,
                    "iteration": ctx.iteration,
                    "tools": list(ctx.tools),
                    "memory_scopes": list(ctx.memory_scopes),
                }
            )
        raise ToolError(f"Context: op must be one of {', '.join(OPS)}")
