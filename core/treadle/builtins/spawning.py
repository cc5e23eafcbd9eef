"""The rules every sub-agent keeps, spawned (`Agent op=spawn|parallel_spawn`, builtins/agent.py)
or resident (`Agent op=open`, builtins/resident.py): a pinned AgentDef must be a live version of
the named agent, children nest at most `MAX_AGENT_DEPTH` deep, and a child inherits its parent's
compaction (loomcycle's spawn inheritance)."""

from __future__ import annotations

from typing import Any

from treadle.domain.runs import RunOptions
from treadle.errors import ToolError
from treadle.store.defs import DefStore
from treadle.tools.base import ToolContext

MAX_AGENT_DEPTH = 3


async def check_pins(defs: DefStore, tenant_id: str, spawns: list[dict[str, Any]]) -> None:
    """Each `def_id` names a version of its spawn's agent that is not retired (ToolError)."""
    for s in spawns:
        if def_id := s.get("def_id"):
            record = await defs.get(tenant_id, "agent", def_id=def_id)
            if record is None or record.name != s["name"]:
                raise ToolError(f"Agent: AgentDef {def_id!r} of agent {s['name']!r} not found")
            if record.status != "active":
                raise ToolError(f"Agent: AgentDef {def_id!r} of agent {s['name']!r} is retired")


async def child_compaction(ctx: ToolContext, spawn: dict[str, Any]) -> RunOptions | None:
    """loomcycle's spawn inheritance: the parent's effective compaction (its agent's < its run's)
    over the child's own def's, then the spawn's `compaction` over that (engine/compaction.py)."""
    inherited = ctx.agent_config.compaction.model_dump(exclude_none=True) if ctx.agent_config.compaction else {}
    parent = await ctx.services.runs.get(ctx.tenant_id, ctx.run_id)
    run_level = (parent.run_options or {}).get("compaction") if parent is not None else None
    merged = {**inherited, **(run_level or {}), **(spawn.get("compaction") or {})}
    return RunOptions(compaction=merged) if merged else None
