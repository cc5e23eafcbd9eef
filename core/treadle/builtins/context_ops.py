"""The Context ops beyond the agent's own state (builtins/context.py), as loomcycle's
(`internal/tools/builtin/context.go`, `context_guide.go`): `guide` (per tool: its ops, required
fields and effects), `doc` (one tool's description and schema), `permissions` (the gates on this
run), `lineage` (an AgentDef's ancestors and descendants), `evaluations` (an AgentDef's aggregate),
`channels` (the tenant's channels and whether this agent may use them). Read-only.

`side_effect_class` is loomcycle's classification by tool name (`pure`, `state`, `filesystem`,
`network`, `privileged`, `unknown`)."""

from __future__ import annotations

from typing import Any

from treadle.domain.defs import DefRecord
from treadle.errors import ToolError
from treadle.tools.base import ToolContext

#: loomcycle's sideEffectClassFor, by tool name
_SIDE_EFFECTS = {
    "Read": "filesystem",
    "Write": "filesystem",
    "Edit": "filesystem",
    "Glob": "filesystem",
    "Grep": "filesystem",
    "WebFetch": "network",
    "WebSearch": "network",
    "HTTP": "network",
    "Bash": "privileged",
    "Agent": "privileged",
    "Memory": "state",
    "Channel": "state",
    "AgentDef": "state",
    "Evaluation": "state",
    "Context": "pure",
    "Skill": "pure",
}
AGENT = "agent"
MAX_DEPTH = 100
DEFAULT_DEPTH = 10
#: lineage: at most this many descendants (loomcycle's maxDescendants), then `truncated`
MAX_DESCENDANTS = 500
#: the tools whose use a channel needs
CHANNEL_TOOLS = ("Channel",)


def side_effect_class(name: str) -> str:
    return _SIDE_EFFECTS.get(name, "unknown")


def _schema_digest(schema: dict[str, Any]) -> tuple[list[str] | None, list[str] | None]:
    """The `op` enum and the required fields of a tool's input schema (None: it has none)."""
    props = schema.get("properties") if isinstance(schema, dict) else None
    op = props.get("op") if isinstance(props, dict) else None
    ops = op.get("enum") if isinstance(op, dict) else None
    required = schema.get("required") if isinstance(schema, dict) else None
    return (list(ops) if isinstance(ops, list) else None, list(required) if isinstance(required, list) else None)


def guide(ctx: ToolContext, held: list[str]) -> dict[str, Any]:
    """loomcycle's op=guide: per held tool, how to call it."""
    out: list[dict[str, Any]] = []
    for name in sorted(held):
        entry: dict[str, Any] = {"name": name, "side_effect_class": side_effect_class(name)}
        found = ctx.services.catalogue.get(name)
        if found is not None:
            ops, required = _schema_digest(found[1])
            if ops:
                entry["ops"] = ops
            if required:
                entry["required"] = required
        out.append(entry)
    return {"tools": out, "count": len(out)}


def doc(ctx: ToolContext, held: list[str], name: Any) -> dict[str, Any]:
    """loomcycle's op=doc: one held tool's description and input schema."""
    if not isinstance(name, str) or not name:
        raise ToolError("Context.doc: missing required field: name")
    found = ctx.services.catalogue.get(name)
    if name not in held:
        if found is not None:
            raise ToolError(f"Context.doc: tool {name!r} is not in this agent's tools")
        raise ToolError(f"Context.doc: tool {name!r} not found (use op=tools to list available)")
    description, schema = found if found is not None else ("", {})
    return {
        "name": name,
        "description": description,
        "input_schema": schema,
        "side_effect_class": side_effect_class(name),
    }


def permissions(ctx: ToolContext, held: list[str]) -> dict[str, Any]:
    """loomcycle's op=permissions: the gates on this run."""
    cfg = ctx.agent_config
    narrowed = ctx.allowed_hosts
    hosts = cfg.allowed_hosts
    return {
        "tools": held,
        "host_policy": {
            "has_list": hosts is not None or narrowed is not None,
            "allowed_hosts": list(hosts) if hosts is not None else None,
            "run_allowed_hosts": list(narrowed) if narrowed is not None else None,
        },
        "memory": {
            "allowed_scopes": list(ctx.memory_scopes),
            "quota_bytes": cfg.memory_quota_bytes or ctx.memory.max_scope_bytes,
        },
        "channels": {
            "publish": any(t in held for t in CHANNEL_TOOLS),
            "subscribe": any(t in held for t in CHANNEL_TOOLS),
        },
        "agent_def_scopes": list(cfg.agent_def_scopes),
        "skill_def_scopes": list(cfg.skill_def_scopes),
        "skills": list(cfg.skills),
        "evaluation_scopes": list(cfg.evaluation_scopes),
        "history_scope": list(cfg.history_scope),
        "sql_scopes": list(cfg.sql_scopes),
    }


def _def_id(op: str, args: dict[str, Any]) -> str:
    def_id = args.get("def_id")
    if not isinstance(def_id, str) or not def_id:
        raise ToolError(f"Context.{op}: missing required field: def_id (use Context op=agents to discover def_ids)")
    return def_id


def _summary(r: DefRecord) -> dict[str, Any]:
    return {
        "def_id": r.def_id,
        "name": r.name,
        "version": r.version,
        "parent_def_id": r.parent_def_id,
        "retired": r.status == "retired",
        "active": r.active,
        "description": r.description,
    }


async def lineage(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    """loomcycle's op=lineage: an AgentDef, its ancestors (nearest first) and its descendants
    (breadth first), `depth` levels each way (default 10, at most 100)."""
    def_id = _def_id("lineage", args)
    depth = args.get("depth", DEFAULT_DEPTH)
    if isinstance(depth, bool) or not isinstance(depth, int):
        raise ToolError("Context.lineage: depth must be an integer")
    depth = DEFAULT_DEPTH if depth <= 0 else min(depth, MAX_DEPTH)
    defs = ctx.services.defs
    chain = await defs.lineage(ctx.tenant_id, AGENT, def_id, max_depth=depth)
    if not chain:
        raise ToolError(f"Context.lineage: def_id {def_id!r} not found")
    descendants: list[dict[str, Any]] = []
    frontier, truncated = [chain[0].def_id], False
    for _ in range(depth):
        if not frontier or truncated:
            break
        children = await defs.children(ctx.tenant_id, AGENT, frontier)
        if len(descendants) + len(children) > MAX_DESCENDANTS:
            children, truncated = children[: MAX_DESCENDANTS - len(descendants)], True
        descendants.extend(_summary(c) for c in children)
        frontier = [c.def_id for c in children]
    return {
        "root": _summary(chain[0]),
        "ancestors": [_summary(r) for r in chain[1:]],
        "descendants": descendants,
        "depth": depth,
        "truncated": truncated,
    }


async def evaluations(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    """loomcycle's op=evaluations: the Evaluation aggregate of an AgentDef (+ its ancestors with
    `include_lineage`), as `Evaluation op=aggregate` answers it."""
    def_id = _def_id("evaluations", args)
    lineage_too = args.get("include_lineage", False)
    if not isinstance(lineage_too, bool):
        raise ToolError("Context.evaluations: include_lineage must be a boolean")
    return await ctx.services.ops["Evaluation"].dispatch(
        ctx.tenant_id, {"op": "aggregate", "def_id": def_id, "include_lineage": lineage_too}
    )


async def channels(ctx: ToolContext, held: list[str], prefix: Any) -> dict[str, Any]:
    """loomcycle's op=channels: the tenant's channels (yaml and runtime), and whether this agent
    may publish or subscribe — treadle has no per-agent channel list: holding the Channel tool is
    the permission (issue 39), so there are no wildcards."""
    if prefix is not None and not isinstance(prefix, str):
        raise ToolError("Context.channels: prefix must be a string")
    may = any(t in held for t in CHANNEL_TOOLS)
    out = [
        {
            "name": d.name,
            "scope": d.scope,
            "semantic": d.semantic,
            "default_ttl": d.default_ttl_seconds,
            "max_messages": d.max_messages,
            "description": d.description,
            "source": d.source,
            "publish": may,
            "subscribe": may,
        }
        for d in await ctx.services.channels.list_defs(ctx.tenant_id)
        if not prefix or d.name.startswith(prefix)
    ]
    out.sort(key=lambda c: str(c["name"]))
    return {"channels": out, "count": len(out), "publish_wildcards": [], "subscribe_wildcards": []}
