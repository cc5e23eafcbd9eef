"""Built-in `TeamDef`: author, inspect, diagram and run multi-agent team workflows (teams/).

The authoring ops run on the def lifecycle in the caller's tenant (as in loomcycle, holding the
tool is the grant: no `*_def_scopes` sub-gate). `run` starts the team run as a child of the
calling run and parks the caller until it ends — no worker is held while the team works — then
answers the walk's result `{name, def_id, run_id, status, final_state?, final_output?, steps}`.
Re-invoking the parked call finds the same child (its idempotency key is the tool_use_id).
"""

from __future__ import annotations

from typing import Any

from treadle.defs.tooling import as_tool_error, def_tool_schema
from treadle.errors import ToolError, TreadleError
from treadle.store.subruns import child_idempotency_key, spawn_wait_key
from treadle.teams.defs import TeamDefFamily
from treadle.teams.runs import TeamRuns
from treadle.tools.base import Park, ToolContext, ToolEffects, ToolResult

OPS = ("create", "fork", "get", "list", "retire", "delete", "promote", "verify", "render_diagram", "run")


class TeamDefTool:
    name = "TeamDef"
    effects: ToolEffects = "transactional"  # every write goes through the step's transaction
    description = (
        "Author, fork, promote, retire, inspect, diagram and run team workflows (Context op=help topic=teams). "
        "The definition is a state-machine graph: states with agent | parallel (agents + consolidator) | "
        "consolidator | terminal handlers, transitions gated by success | pushback:<reason> | "
        "conditional:<expr>, a per-state iteration cap (max_iterations, default 10). An invalid graph is "
        "refused and nothing is stored. render_diagram → Mermaid stateDiagram-v2 (an overlay: dry-run preview). "
        "run (name | def_id, input, interrupt_on_cap?) walks the team with child runs and answers the trace. "
        "Ops: " + ", ".join(OPS) + "."
    )
    input_schema: dict[str, Any] = def_tool_schema(
        OPS, "the team graph: entry, states, transitions, max_iterations?, colors? (colours are not hashed)",
        create_promotes=True, fork_promotes=False,
        format={"type": "string", "enum": ["mermaid", "svg"],
                "description": "render_diagram: mermaid (default) or svg (a picture)"},
        highlight_state={"type": "string", "description": "render_diagram: outline this state"},
        run_id={"type": "string", "description": "render_diagram: a team run — its version, its current state "
                "outlined"},
        input={"type": "string", "description": "run: the task handed to the entry state"},
        interrupt_on_cap={"type": "boolean", "description": "run: at a state's cap ask a human (continue | "
                          "reroute:<state> | abort) instead of ending with iteration_cap"},
    )

    async def invoke(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult | Park:
        family = ctx.services.ops["TeamDef"]
        if not isinstance(family, TeamDefFamily):
            raise ToolError("TeamDef: not available in this runtime")
        if isinstance(args, dict) and args.get("op") == "run":
            try:
                return await _run(ctx, family, args)
            except ToolError:
                raise
            except TreadleError as exc:
                raise as_tool_error(family.label, exc) from None
        try:
            result = await family.dispatch(ctx.tenant_id, args, run_id=ctx.run_id)
        except TreadleError as exc:
            raise as_tool_error(family.label, exc) from None
        return ToolResult.json(result)


async def _run(ctx: ToolContext, family: TeamDefFamily, args: dict[str, Any]) -> ToolResult | Park:
    for key in ("wait", "timeout_ms"):
        if key in args:
            raise ToolError(f"TeamDef.run: {key} is for the HTTP route; through the tool the run waits parked")
    runner = family.runner
    if not isinstance(runner, TeamRuns):
        raise ToolError("TeamDef.run: this runtime cannot start team runs")
    key = spawn_wait_key(ctx.run_id, ctx.tool_use_id)
    version = await ctx.waits.version(ctx.tenant_id, key)  # before looking at the child
    kids = await ctx.services.subruns.children(ctx.tenant_id, ctx.run_id, key)
    child = kids.get(0)
    if child is None:
        record, task, interrupt_on_cap = await family.run_args(ctx.tenant_id, await family.checked(args))
        depth, root = await ctx.services.subruns.lineage(ctx.tenant_id, ctx.run_id)
        new = runner.new_run(ctx.tenant_id, record, task, interrupt_on_cap=interrupt_on_cap, user_id=ctx.user_id,
                             idempotency_key=child_idempotency_key(ctx.run_id, ctx.tool_use_id, 0),
                             parent_run_id=ctx.run_id, root_run_id=root, depth=depth + 1, parent_wait_key=key,
                             allowed_hosts=ctx.allowed_hosts, parent_context=ctx.parent_context)
        run, _ = await ctx.services.starter.start_run(new)
        if not run.terminal:
            return Park("agent", {key: version}, extra={"op": "team_run", "count": 1,
                                                        "children": [{"index": 0, "agent": run.agent,
                                                                      "run_id": run.id}]})
        return ToolResult.json(await runner.answer(ctx.tenant_id, run.id, run.status, run.error))
    if not child.terminal:
        return Park("agent", {key: version}, extra={"op": "team_run", "count": 1,
                                                    "children": [{"index": 0, "agent": child.agent,
                                                                  "run_id": child.run_id}]})
    return ToolResult.json(await runner.answer(ctx.tenant_id, child.run_id, child.status, child.error))
