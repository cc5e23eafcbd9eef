"""Built-in `ScheduleDef` (default-deny): author and manage scheduled runs.

The agent's `schedule_def_scopes` decides which schedules it may touch, by the agent a schedule
starts: `self`, `named:<agent>`, `any`; empty (the default) refuses every op.
"""

from __future__ import annotations

from typing import Any

from treadle.defs.gates import AgentGate
from treadle.defs.lifecycle import CORE_OPS
from treadle.defs.tooling import def_tool_schema, run_op
from treadle.tools.base import Park, ToolContext, ToolEffects, ToolResult

#: the lifecycle's ops plus ScheduleFamily.extra_ops (the family is not imported here: a worker
#: that never runs a ScheduleDef call never imports the triggers)
OPS = (*CORE_OPS, "add_hook", "remove_hook")


async def run_trigger_op(ctx: ToolContext, scopes_field: str, label: str, args: dict[str, Any]) -> ToolResult:
    """A ScheduleDef/WebhookDef call, gated by the `scopes_field` of the run's own resolved agent
    (its AgentDef when it was pinned to one — never the treadle.yaml agent of the same name)."""
    scopes = tuple(getattr(ctx.agent_config, scopes_field, ()) or ())
    gate = AgentGate(scopes=scopes, field=scopes_field, self_agent=ctx.agent)
    return await run_op(ctx, ctx.services.ops[label], gate, args)


class ScheduleDefTool:
    name = "ScheduleDef"
    effects: ToolEffects = "transactional"  # every write goes through the step's transaction
    description = (
        "Manage scheduled runs (cron). op: create (name, overlay{agent, schedule '0 3 * * *', timezone, prompt, "
        "user_id, metadata, max_fires, enabled, catch_up_max, on_complete[]}) | fork (def_id or name, overlay) | "
        "get | list | retire | promote (def_id) | verify (name, content_sha256) | add_hook (hook{kind: "
        "memory.set|channel.publish, ...}) | remove_hook (hook_index). Limited to the agents in this agent's "
        "schedule_def_scopes."
    )
    input_schema: dict[str, Any] = def_tool_schema(
        OPS, "ScheduleDef fields", create_promotes=True, fork_promotes=True,
        hook={"type": "object"}, hook_index={"type": "integer", "minimum": 0},
    )

    async def invoke(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult | Park:
        return await run_trigger_op(ctx, "schedule_def_scopes", "ScheduleDef", args)
