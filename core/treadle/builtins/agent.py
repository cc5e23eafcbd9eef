"""Built-in `Agent`: run sub-agents as real child runs and wait for them without holding anything.

`spawn` ({name, prompt, def_id?}) starts one child; `parallel_spawn` ({spawns: [{name, prompt,
def_id?}, ...]}, at most 32) starts several. A `def_id` runs that exact AgentDef version of `name`
(promoted or not, but not retired); without one the child gets what a new run of `name` gets.
The calling run parks (status `waiting`) until every child has settled, then receives
index-aligned results `[{index, agent, run_id, ok, stop_reason, output?, error?}]` (`spawn`
receives the single entry). A child's failure stays inside its entry; the call itself succeeds.
`parallel_spawn` also takes `wait` (treadle's, the team `parallel` handler's: `all` (default) |
`any` | `at_least:<N>`): once that many children completed, the unfinished ones are cancelled
and the ones not started yet never start (their entries say `cancelled: …`) — loomcycle's
teamrun.runParallel. The call still returns only when every started child has settled.

How it stays exact across crashes and re-invocations:
- each invocation reads the wait key's version first (store/waits.py), then looks at the
  children in the database, starts the missing ones (at most `max_concurrent_children` of the
  calling agent unfinished at once), and parks on the key if any child is unfinished;
- a child's idempotency key is (parent run, tool_use_id, index): re-invoking the call finds the
  children it already created instead of starting new ones;
- a child that reaches a terminal status pokes the key (engine/waiting.py); if that poke is
  lost, the sweeper finds the parked parent whose children are all finished and pokes it.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError

from treadle.builtins import resident
from treadle.builtins.spawning import MAX_AGENT_DEPTH
from treadle.builtins.spawning import check_pins as _check_pins
from treadle.builtins.spawning import child_compaction as _child_compaction
from treadle.config import CompactionConfig
from treadle.domain.events import EventType
from treadle.errors import ToolError
from treadle.store.runs import NewRun
from treadle.store.subruns import Child, child_idempotency_key, spawn_wait_key
from treadle.tools.base import Park, ToolContext, ToolEffects, ToolResult

OPS = ("spawn", "parallel_spawn", *resident.RESIDENT_OPS)
MAX_PARALLEL_SPAWNS = 32
MAX_PROMPT_CHARS = 256_000
_AT_LEAST = re.compile(r"^at_least:([1-9][0-9]{0,3})$")

_SPAWN_PROPS: dict[str, Any] = {
    "name": {"type": "string", "description": "the configured agent to run"},
    "prompt": {"type": "string", "description": "the child's task"},
    "def_id": {"type": "string", "description": "optional: run this AgentDef version of `name`"},
    "compaction": {"type": "object", "description": "optional: the child's context compaction, over what it "
                   "inherits (your effective settings, then its own def's for what those leave unset)"},
}


class AgentTool:
    name = "Agent"
    effects: ToolEffects = "transactional"  # every write goes through the step's transaction
    description = (
        "Run sub-agents as child runs and wait for their results. op: spawn (name, prompt, def_id?) → the "
        "child's result {index, agent, ok, output?, error?}; parallel_spawn (spawns: [{name, prompt, def_id?}], "
        "≤32) → the "
        "results in the same order. Waiting holds no resources; a child's failure is reported in its entry. "
        "Resident (stateful) children: open (name, prompt, def_id?, idle_ttl_seconds?) starts one that stays "
        "alive between messages → {child_run_id, state, output}; send (child_run_id, prompt, timeout_ms?) gives "
        "it the next turn and returns that turn's output; poll (child_run_id, timeout_ms?) checks it without "
        "input; cancel (child_run_id) stops its current turn (it stays alive); close (child_run_id) ends it. "
        "state: awaiting_input | running | completed | failed | cancelled | closed. Close what you open."
    )
    input_schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "op": {"type": "string", "enum": list(OPS), "default": "spawn"},
            **_SPAWN_PROPS,
            "spawns": {
                "type": "array",
                "maxItems": MAX_PARALLEL_SPAWNS,
                "items": {"type": "object", "properties": _SPAWN_PROPS, "required": ["name", "prompt"]},
            },
            "wait": {"type": "string", "description": "parallel_spawn: all (default) | any | at_least:<N> — once "
                     "that many children completed, the rest are cancelled"},
            **resident.RESIDENT_PROPS,
        },
    }

    async def invoke(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult | Park:
        services = ctx.services
        op = args.get("op", "spawn")
        if op not in OPS:
            raise ToolError(f"Agent: op must be one of {', '.join(OPS)}")
        if op in resident.RESIDENT_OPS:
            return await resident.invoke(ctx, op, args)
        spawns = _spawns(args, op)
        need = _need(args, op, len(spawns))
        known = {name for name in {s["name"] for s in spawns}
                 if await services.agents.current(ctx.tenant_id, name) is not None}
        unknown = sorted({s["name"] for s in spawns if s["name"] not in known and not s.get("def_id")})
        if unknown and ctx.resume is None:
            configured = ", ".join(services.agents.static_names())
            raise ToolError(f"Agent: unknown agent(s) {', '.join(unknown)} (configured: {configured}; "
                            "or a promoted AgentDef)")
        if ctx.resume is None:
            await _check_pins(services.defs, ctx.tenant_id, spawns)
        startable = known | {s["name"] for s in spawns if s.get("def_id")}

        key = spawn_wait_key(ctx.run_id, ctx.tool_use_id)
        version = await ctx.waits.version(ctx.tenant_id, key)  # before looking at the children
        store = services.subruns
        kids = await store.children(ctx.tenant_id, ctx.run_id, key)
        # `wait` met (any / at_least:N): the unfinished children are cancelled, no more start
        enough = need < len(spawns) and sum(1 for k in kids.values() if k.status == "completed") >= need
        skipped = f"parallel_spawn wait {args.get('wait')!r} met" if enough else ""
        if enough:
            for k in kids.values():
                if not k.terminal:  # flagged again on a later invocation: idempotent
                    await services.canceller.cancel_run(ctx.tenant_id, k.run_id, skipped)
        missing = [] if enough else [i for i in range(len(spawns)) if i not in kids and spawns[i]["name"] in startable]
        if missing:
            limit = ctx.agent_config.max_concurrent_children  # the run's own resolved agent
            room = limit - sum(1 for k in kids.values() if not k.terminal)
            if room > 0:
                depth, root = await store.lineage(ctx.tenant_id, ctx.run_id)
                if depth + 1 > MAX_AGENT_DEPTH:
                    raise ToolError(f"Agent: sub-agents may nest at most {MAX_AGENT_DEPTH} deep (this run is at "
                                    f"depth {depth})")
                for i in missing[:room]:
                    kids[i] = await _start_child(ctx, spawns[i], i, key, depth, root)

        settled = all((kids[i].terminal if i in kids else enough or s["name"] not in startable)
                      for i, s in enumerate(spawns))
        if not settled:
            children = [{"index": k.index, "agent": k.agent, "run_id": k.run_id}
                        for k in sorted(kids.values(), key=lambda c: c.index)]
            return Park("agent", {key: version}, extra={"op": op, "count": len(spawns), "children": children})

        entries = [
            kids[i].result() if i in kids
            else {"index": i, "agent": s["name"], "ok": False, "error": f"cancelled: {skipped} (never started)"}
            if enough  # `wait` was met before this one could start
            # a name unknown now: the config changed while the call waited
            else {"index": i, "agent": s["name"], "ok": False, "error": f"unknown agent {s['name']!r}"}
            for i, s in enumerate(spawns)
        ]

        result = ToolResult.json(entries[0] if op == "spawn" else entries)
        for e in entries:
            result.events.append((EventType.SPAWN_CHILD_RESULT, {"spawn_child": {"tool_use_id": ctx.tool_use_id, **e}}))
        return result


async def _start_child(
    ctx: ToolContext, spawn: dict[str, Any], index: int, key: str, depth: int, root: str
) -> Child:
    run, _created = await ctx.services.starter.start_run(
        NewRun(
            tenant_id=ctx.tenant_id,
            agent=spawn["name"],
            segments=[{"role": "user", "content": [{"type": "trusted-text", "text": spawn["prompt"]}]}],
            user_id=ctx.user_id,
            idempotency_key=child_idempotency_key(ctx.run_id, ctx.tool_use_id, index),
            parent_run_id=ctx.run_id,
            root_run_id=root,
            depth=depth + 1,
            parent_wait_key=key,
            def_id=spawn.get("def_id"),
            allowed_hosts=ctx.allowed_hosts,  # a child never reaches further than its parent
            parent_context=ctx.parent_context,  # loomcycle: inherited by sub-agents
            run_options=await _child_compaction(ctx, spawn),
        )
    )
    if ctx.services.volumes is not None:  # nor reaches more volumes, or with a wider mode
        await ctx.services.volumes.grant_child(ctx.tenant_id, ctx.run_id, ctx.agent_config, run.id)
    return Child(index, run.id, run.agent, run.status, run.stop_reason, run.error)


def _need(args: dict[str, Any], op: str, n: int) -> int:
    """How many children must complete before the rest are cancelled (`n`: wait for all)."""
    wait = args.get("wait")
    if wait is None or wait in ("", "all"):
        return n
    if op != "parallel_spawn":
        raise ToolError("Agent.spawn: wait is a parallel_spawn field")
    if wait == "any":
        return 1
    m = _AT_LEAST.match(wait) if isinstance(wait, str) else None
    if m is None:
        raise ToolError(f"Agent.parallel_spawn: wait {wait!r} must be all, any or at_least:<N>")
    return min(int(m.group(1)), n)


def _spawns(args: dict[str, Any], op: str) -> list[dict[str, Any]]:
    raw: Any = [args] if op == "spawn" else args.get("spawns")
    if op == "parallel_spawn" and (not isinstance(raw, list) or not raw):
        raise ToolError("Agent.parallel_spawn: spawns (a non-empty list of {name, prompt}) is required")
    assert isinstance(raw, list)
    if len(raw) > MAX_PARALLEL_SPAWNS:
        raise ToolError(f"Agent.parallel_spawn: at most {MAX_PARALLEL_SPAWNS} spawns")
    out: list[dict[str, Any]] = []
    for i, s in enumerate(raw):
        where = f"Agent.{op}" + (f": spawns[{i}]" if op == "parallel_spawn" else "")
        if not isinstance(s, dict):
            raise ToolError(f"{where} must be an object {{name, prompt}}")
        name, prompt = s.get("name"), s.get("prompt")
        if not isinstance(name, str) or not name:
            raise ToolError(f"{where}: name (an agent name) is required")
        if not isinstance(prompt, str) or not prompt.strip():
            raise ToolError(f"{where}: prompt (non-empty text) is required")
        if len(prompt) > MAX_PROMPT_CHARS:
            raise ToolError(f"{where}: prompt is longer than {MAX_PROMPT_CHARS} characters")
        def_id = s.get("def_id")
        if def_id is not None and (not isinstance(def_id, str) or not 0 < len(def_id) <= 64):
            raise ToolError(f"{where}: def_id must be an AgentDef id (a string)")
        spec: dict[str, Any] = {"name": name, "prompt": prompt, **({"def_id": def_id} if def_id else {})}
        if s.get("compaction") is not None:
            try:
                spec["compaction"] = CompactionConfig.model_validate(s["compaction"]).model_dump(exclude_none=True)
            except ValidationError as exc:
                raise ToolError(f"{where}: compaction: {exc.errors()[0]['msg']}") from None
        out.append(spec)
    return out
