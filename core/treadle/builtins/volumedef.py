"""Built-in `VolumeDef` (default-deny): create, inspect and remove runtime volumes by name and
mode (never a path). The agent's `volume_def_scopes` decides which names it may touch: `self`
(the volumes it binds), `named:<volume>`, `any`; empty refuses all. It is an external tool:
`purge` deletes files, which no transaction can roll back (create dedupes and delete/purge are
idempotent, so a re-run after a crash is harmless)."""

from __future__ import annotations

from typing import Any

from treadle.builtins.agentdef import name_gate
from treadle.defs.tooling import def_tool_schema, run_op
from treadle.substrate.volumedefs import VolumeDefFamily
from treadle.tools.base import Park, ToolContext, ToolEffects, ToolResult


class VolumeDefTool:
    name = "VolumeDef"
    effects: ToolEffects = "external"
    description = (
        "Manage runtime volumes (workspaces for the file tools) by name and mode — you never give a path. "
        "op: create (name, mode ro|rw, ephemeral: one per top-level run, purged when it ends) | get | list | "
        "delete (the files stay) | purge (deletes the files) | fork | retire | promote | verify. An agent "
        "reaches a volume when its volumes: bindings name it. Limited to this agent's volume_def_scopes."
    )
    input_schema: dict[str, Any] = def_tool_schema(
        VolumeDefFamily.ops(), "VolumeDef fields: mode (ro|rw, default rw), ephemeral", create_promotes=True,
        fork_promotes=True,
        mode={"type": "string", "enum": ["ro", "rw"], "description": "create (flat form): the mode"},
        ephemeral={"type": "boolean", "description": "create (flat form): one instance per top-level run"},
        mount_at={"type": "string", "description": "create: name the volume in the tenant's Path tree here "
                                                   "(default /vol/<name>; not for ephemeral volumes)"},
    )

    async def invoke(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult | Park:
        family = ctx.services.ops["VolumeDef"]
        own = frozenset(b.name for b in ctx.agent_config.volumes)
        return await run_op(ctx, family, name_gate(ctx, "volume_def_scopes", own, ()), args)
