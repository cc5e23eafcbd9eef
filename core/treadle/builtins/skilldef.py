"""Built-in `SkillDef` (default-deny): manage skills — text added to the system prompt of the
agents that list them in `skills:`. The calling agent's `skill_def_scopes` decides which skills
it may touch: `self` (the skills it lists itself, or its `skills:` patterns admit), `named:<skill>`,
`any`; empty refuses all."""

from __future__ import annotations

import dataclasses
from typing import Any

from treadle.builtins.agentdef import name_gate
from treadle.defs.lifecycle import CORE_OPS
from treadle.defs.tooling import def_tool_schema, run_op
from treadle.domain import skillmatch
from treadle.tools.base import Park, ToolContext, ToolEffects, ToolResult

OPS = CORE_OPS


class SkillDefTool:
    name = "SkillDef"
    effects: ToolEffects = "transactional"  # every write goes through the step's transaction
    description = (
        "Manage skills (instructions added to the system prompt of agents that list them in skills:). "
        "op: create (name, overlay{body, description, tools}) | fork (def_id or name, overlay) | get | list | "
        "retire | promote (def_id) | verify (name, content_sha256). Runs pin the skill version they start with. "
        "Limited to the skills in this agent's skill_def_scopes."
    )
    input_schema: dict[str, Any] = def_tool_schema(OPS, "SkillDef fields: body (required), description, tools",
                                                   create_promotes=True, fork_promotes=False)

    async def invoke(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult | Park:
        family = ctx.services.ops["SkillDef"]
        skills = list(getattr(ctx.agent_config, "skills", ()) or ())
        gate = name_gate(ctx, "skill_def_scopes", frozenset(skillmatch.literals(skills)), ())
        if skillmatch.has_patterns(skills):  # `self` covers what the agent's skills: patterns admit
            gate = dataclasses.replace(gate, own_match=lambda name: skillmatch.allowed(skills, name))
        return await run_op(ctx, family, gate, args)
