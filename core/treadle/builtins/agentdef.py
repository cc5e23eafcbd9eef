"""Built-in `AgentDef` (default-deny): create, fork, get, list, retire, promote and verify agent
definitions at run time (substrate/agentdefs.py).

The calling agent's `agent_def_scopes` decides which names it may touch: `self` (its own name),
`named:<agent>`, `any`; empty (the default) refuses every op. A def written through the tool may
carry only tools and scopes the caller holds itself, or that its parent already had.
"""

from __future__ import annotations

from typing import Any

from treadle.defops import op_schema, run_op
from treadle.substrate.agentdefs import GRANT_FIELDS
from treadle.substrate.family import Gate
from treadle.tools.base import Park, ToolContext, ToolResult

OPS = ("create", "fork", "get", "list", "retire", "promote", "verify")


def substrate_def_schema(ops: tuple[str, ...], overlay_help: str) -> dict[str, Any]:
    return op_schema(
        ops, overlay_help,
        promote={"type": "boolean",
                 "description": "make it the version new runs get (create: default true, fork: default false)"},
        include_retired={"type": "boolean"},
        content_sha256={"type": "string", "description": "verify: the hash computed locally"},
    )


def gate_for(ctx: ToolContext, field: str, own: frozenset[str], grant_fields: tuple[str, ...]) -> Gate:
    cfg = ctx.agent_config
    scopes = tuple(getattr(cfg, field, ()) or ())
    grants = {f: frozenset(getattr(cfg, f, ()) or ()) for f in grant_fields}
    return Gate(scopes, field, own, grants)


class AgentDefTool:
    name = "AgentDef"
    description = (
        "Manage agent definitions at run time. op: create (name, overlay{system_prompt, tools, provider, model, "
        "tier, max_iterations, max_tokens, skills, memory_scopes, ...}, promote default true) | fork (def_id or "
        "name, overlay changes; null removes a field; promote default false) | get (def_id or name, "
        "include_lineage) | list | retire | promote (def_id) | verify (name, content_sha256). A promoted def "
        "is what new runs of that name get. Limited to the names in this agent's agent_def_scopes."
    )
    input_schema: dict[str, Any] = substrate_def_schema(OPS, "AgentDef fields (treadle.yaml agent keys)")

    async def invoke(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult | Park:
        family = ctx.services.ops["AgentDef"]
        gate = gate_for(ctx, "agent_def_scopes", frozenset({ctx.agent}), GRANT_FIELDS)
        return await run_op(ctx, family, gate, args)
