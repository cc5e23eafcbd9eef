"""Built-in `ScheduleDef` (default-deny): author and manage scheduled runs.

The agent's `schedule_def_scopes` decides which schedules it may touch, by the agent a schedule
starts: `self`, `named:<agent>`, `any`; empty (the default) refuses every op.
"""

from __future__ import annotations

from typing import Any

from treadle.defops import op_schema, run_op
from treadle.tools.base import Park, ToolContext, ToolResult
from treadle.triggers.defs import ScopeGate

OPS = ("create", "fork", "get", "list", "retire", "promote", "add_hook", "remove_hook")


def trigger_def_schema(ops: tuple[str, ...], overlay_help: str) -> dict[str, Any]:
    return op_schema(ops, overlay_help, promote={"type": "boolean"}, retired={"type": "boolean"},
                     hook={"type": "object"}, hook_index={"type": "integer", "minimum": 0})


async def run_def_op(ctx: ToolContext, scopes_field: str, label: str, args: dict[str, Any]) -> ToolResult:
    """A ScheduleDef/WebhookDef call, gated by the `scopes_field` of the run's own resolved agent
    (its AgentDef when it was pinned to one — never the treadle.yaml agent of the same name)."""
    scopes = tuple(getattr(ctx.agent_config, scopes_field, ()))
    return await run_op(ctx, ctx.services.ops[label], ScopeGate(scopes, ctx.agent, scopes_field), args)


class ScheduleDefTool:
    name = "ScheduleDef"
    description = (
        "Manage scheduled runs (cron). op: create (name, overlay{agent, schedule '0 3 * * *', timezone, prompt, "
        "user_id, metadata, max_fires, enabled, catch_up_max, on_complete[]}) | fork (def_id or name, overlay) | "
        "get | list | retire | promote (def_id) | add_hook (hook{kind: memory.set|channel.publish, ...}) | "
        "remove_hook (hook_index). Limited to the agents in this agent's schedule_def_scopes."
    )
    input_schema: dict[str, Any] = trigger_def_schema(OPS, "ScheduleDef fields")

    async def invoke(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult | Park:
        return await run_def_op(ctx, "schedule_def_scopes", "ScheduleDef", args)
