"""Built-in `ScheduleDef` (default-deny): author and manage scheduled runs.

The agent's `schedule_def_scopes` decides which schedules it may touch, by the agent a schedule
starts: `self`, `named:<agent>`, `any`; empty (the default) refuses every op.
"""

from __future__ import annotations

from typing import Any

from treadle.errors import ToolError, TreadleError
from treadle.schedule.defops import ScopeGate
from treadle.tools.base import Park, ToolContext, ToolResult

OPS = ("create", "fork", "get", "list", "retire", "promote", "add_hook", "remove_hook")


def def_op_schema(ops: tuple[str, ...], overlay_help: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "op": {"type": "string", "enum": list(ops)},
            "name": {"type": "string"},
            "def_id": {"type": "string"},
            "version": {"type": "integer", "minimum": 1},
            "overlay": {"type": "object", "description": overlay_help},
            "description": {"type": "string"},
            "promote": {"type": "boolean"},
            "retired": {"type": "boolean"},
            "include_lineage": {"type": "boolean"},
            "hook": {"type": "object"},
            "hook_index": {"type": "integer", "minimum": 0},
        },
        "required": ["op"],
    }


async def run_def_op(
    ctx: ToolContext, family_of: Any, scopes_field: str, label: str, args: dict[str, Any]
) -> ToolResult:
    rt = ctx.services.get("runtime")
    if rt is None:
        raise ToolError(f"{label}: not available in this runtime")
    agent = rt.agents.get(ctx.agent)
    scopes = tuple(getattr(agent.config, scopes_field, ()) if agent is not None else ())
    gate = ScopeGate(scopes, ctx.agent, scopes_field)
    try:
        result = await family_of(rt).family.dispatch(ctx.tenant_id, args, gate=gate, run_id=ctx.run_id)
    except TreadleError as exc:
        raise ToolError(f"{label}: {exc.message}" if not exc.message.startswith(label) else exc.message) from None
    return ToolResult.json(result)


class ScheduleDefTool:
    name = "ScheduleDef"
    description = (
        "Manage scheduled runs (cron). op: create (name, overlay{agent, schedule '0 3 * * *', timezone, prompt, "
        "user_id, metadata, max_fires, enabled, catch_up_max, on_complete[]}) | fork (def_id or name, overlay) | "
        "get | list | retire | promote (def_id) | add_hook (hook{kind: memory.set|channel.publish, ...}) | "
        "remove_hook (hook_index). Limited to the agents in this agent's schedule_def_scopes."
    )
    input_schema: dict[str, Any] = def_op_schema(OPS, "ScheduleDef fields")

    async def invoke(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult | Park:
        from treadle.schedule.service import schedule_service

        return await run_def_op(ctx, schedule_service, "schedule_def_scopes", "ScheduleDef", args)
