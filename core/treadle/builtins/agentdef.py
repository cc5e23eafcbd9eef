"""Built-in `AgentDef` (default-deny): create, fork, get, list, retire, promote and verify agent
definitions at run time (substrate/agentdefs.py over the def lifecycle, treadle/defs).

The calling agent's `agent_def_scopes` decides which names it may touch: `self` (its own name),
`named:<agent>`, `any`; empty (the default) refuses every op. A def written through the tool may
carry only tools and scopes the caller holds itself, or that its parent already had.
"""

from __future__ import annotations

from typing import Any

from treadle.defs.gates import UNRESTRICTED_WHEN_ABSENT, NameGate
from treadle.defs.lifecycle import CORE_OPS
from treadle.defs.tooling import def_tool_schema, run_op
from treadle.domain.channelacl import acl_grants
from treadle.specs.volumes import binding_grants
from treadle.substrate.agentdefs import GRANT_FIELDS
from treadle.tools.base import Park, ToolContext, ToolEffects, ToolResult

OPS = CORE_OPS


def name_gate(ctx: ToolContext, field: str, own: frozenset[str], grant_fields: tuple[str, ...]) -> NameGate:
    """The calling agent's gate over def names: its `field` scopes, the names `self` covers, and
    the grants it holds itself (from its resolved agent, never a yaml namesake)."""
    cfg = ctx.agent_config
    scopes = tuple(getattr(cfg, field, ()) or ())
    grants: dict[str, frozenset[str] | None] = {}
    for f in grant_fields:
        held = getattr(cfg, f, None)
        if f == "volumes":
            held = binding_grants(held or [])  # as AgentDefFamily.granted compares them
        elif f == "channels":
            held = acl_grants(held.model_dump() if held is not None else None)
        elif f == "memory_consolidation":  # a boolean grant, compared as a set of one
            held = ["granted"] if held else []
        grants[f] = None if held is None and f in UNRESTRICTED_WHEN_ABSENT else frozenset(held or ())
    return NameGate(scopes=scopes, field=field, own=own, grants=grants)


class AgentDefTool:
    name = "AgentDef"
    effects: ToolEffects = "transactional"  # every write goes through the step's transaction
    description = (
        "Manage agent definitions at run time. op: create (name, overlay{system_prompt, tools, provider, model, "
        "tier, max_iterations, max_tokens, skills, memory_scopes, ...}, promote default true) | fork (def_id or "
        "name, overlay changes; null removes a field; promote default false) | get (def_id or name, "
        "include_lineage) | list | retire | promote (def_id) | verify (name, content_sha256). A promoted def "
        "is what new runs of that name get. Limited to the names in this agent's agent_def_scopes."
    )
    input_schema: dict[str, Any] = def_tool_schema(OPS, "AgentDef fields (treadle.yaml agent keys)",
                                                   create_promotes=True, fork_promotes=False)

    async def invoke(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult | Park:
        family = ctx.services.ops["AgentDef"]
        return await run_op(ctx, family, name_gate(ctx, "agent_def_scopes", frozenset({ctx.agent}), GRANT_FIELDS),
                            args)
