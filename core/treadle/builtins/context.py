"""Built-in `Context`: facts an agent may ask about itself and the runtime (read-only).

ops (loomcycle's 13): self (agent, def_id, model, iteration, context-window use, volumes) | tools (its
tools with their input schemas) | guide, doc, permissions, lineage, evaluations, channels
(builtins/context_ops.py) | agents (what is runnable in the tenant; `prefix`) | time | help (bundled
topics written for agents; no topic → the list; `query` → matching sections) | capabilities
(embedder, vector search, def families, scopes) | compact (a self-compaction before the next
iteration: engine/compaction.py; the step reads the call off the transcript, engine/replay.py).
"""

from __future__ import annotations

from datetime import UTC, datetime
from importlib import resources
from typing import Any

from treadle.builtins import context_ops
from treadle.domain.events import EventType
from treadle.domain.skillmatch import SKILL_TOOL, uses_skill_tool
from treadle.engine.compaction import Settings
from treadle.errors import ToolError
from treadle.tools.base import Park, ToolContext, ToolEffects, ToolResult

OPS = ("self", "tools", "guide", "doc", "permissions", "agents", "lineage", "evaluations", "channels", "help",
       "time", "compact", "capabilities")
#: each op's fields beyond `op` (loomcycle's contextInput); another field is refused by name
FIELDS = {"doc": ("name",), "agents": ("prefix",), "channels": ("prefix",), "lineage": ("def_id", "depth"),
          "evaluations": ("def_id", "include_lineage"), "help": ("topic", "query")}
HELP_PACKAGE = "treadle.substrate.help"


def help_topics() -> dict[str, str]:
    """topic → its text (the bundled `substrate/help/*.md`)."""
    out: dict[str, str] = {}
    for entry in resources.files(HELP_PACKAGE).iterdir():
        if entry.name.endswith(".md"):
            out[entry.name.removesuffix(".md")] = entry.read_text(encoding="utf-8")
    return dict(sorted(out.items()))


def _summary(text: str) -> str:
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first.lstrip("# ").split(" — ", 1)[-1]


class ContextTool:
    name = "Context"
    effects: ToolEffects = "transactional"  # every write goes through the step's transaction
    description = (
        "Read-only facts about yourself and the runtime. op: self (your agent, def_id, model, iteration, context "
        "use, your volumes and their modes) | tools (your tools and their input schemas) | guide (how to call "
        "each of your tools: ops, required fields) | doc (name: one tool's docs) | permissions (the gates on this "
        "run) | agents (agents runnable here; prefix) | lineage (def_id, depth: an AgentDef's ancestors and "
        "descendants) | evaluations (def_id, include_lineage: its evaluation aggregate) | channels (prefix) | "
        "time (UTC now) | "
        "help (topic: getting-started, memory, defs, skills, teams, evaluation, context, volumes; none → list; "
        "query → matching sections) | capabilities | compact (summarize your older turns before your next step, "
        "freeing context; see op=self's `context` and `compaction`)."
    )
    input_schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "op": {"type": "string", "enum": list(OPS)},
            "name": {"type": "string", "description": "doc only: the tool to fetch docs for"},
            "prefix": {"type": "string", "description": "agents / channels: a name prefix filter"},
            "def_id": {"type": "string", "description": "lineage / evaluations: the AgentDef (see op=agents)"},
            "depth": {"type": "integer", "description": "lineage only: levels each way (default 10, at most 100)"},
            "include_lineage": {"type": "boolean", "description": "evaluations only: add the ancestors' evaluations"},
            "topic": {"type": "string", "description": "help: the topic to read"},
            "query": {"type": "string", "description": "help: search the topics' sections; topic is then ignored"},
        },
        "required": ["op"],
        "additionalProperties": False,
    }

    async def invoke(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult | Park:
        op = args.get("op")
        if op in OPS:
            extra = sorted(set(args) - {"op", *FIELDS.get(str(op), ())})
            if extra:
                raise ToolError(f"Context.{op}: unknown field(s) {', '.join(extra)} for this op")
        if op == "time":
            now = ctx.now or datetime.now(UTC)
            return ToolResult.json({"now": now.isoformat(), "unix": now.timestamp(), "timezone": "UTC"})
        if op == "self":
            return ToolResult.json(await _self(ctx))
        if op == "tools":
            return ToolResult.json({"tools": [_tool_entry(ctx, name) for name in _held_tools(ctx)]})
        if op == "agents":
            return ToolResult.json(await _agents(ctx, args.get("prefix")))
        if op == "help":
            return ToolResult.json(_help(args.get("topic"), args.get("query")))
        if op == "guide":
            return ToolResult.json(context_ops.guide(ctx, _held_tools(ctx)))
        if op == "doc":
            return ToolResult.json(context_ops.doc(ctx, _held_tools(ctx), args.get("name")))
        if op == "permissions":
            return ToolResult.json(context_ops.permissions(ctx, _held_tools(ctx)))
        if op == "lineage":
            return ToolResult.json(await context_ops.lineage(ctx, args))
        if op == "evaluations":
            return ToolResult.json(await context_ops.evaluations(ctx, args))
        if op == "channels":
            return ToolResult.json(await context_ops.channels(ctx, _held_tools(ctx), args.get("prefix")))
        if op == "capabilities":
            return ToolResult.json(await _capabilities(ctx))
        if op == "compact":  # the step compacts before the next iteration (engine/plan.py compaction_due)
            return ToolResult.json({"requested": True, "applies": "before your next step",
                                    "compaction": await _compaction(ctx)})
        raise ToolError(f"Context: op must be one of {', '.join(OPS)}")


def _held_tools(ctx: ToolContext) -> list[str]:
    """The agent's tools: its `tools:`, and Skill when its `skills:` patterns add it (engine/agents.py)."""
    names = list(ctx.tools)
    if SKILL_TOOL not in names and uses_skill_tool(names, list(ctx.agent_config.skills)):
        names.append(SKILL_TOOL)
    return names


async def _self(ctx: ToolContext) -> dict[str, Any]:
    cfg = ctx.agent_config
    out: dict[str, Any] = {
        "agent": ctx.agent, "def_id": ctx.def_id, "content_sha256": None, "run_id": ctx.run_id,
        "user_id": ctx.user_id, "tenant_id": ctx.tenant_id, "model": ctx.model, "provider": ctx.provider,
        "iteration": ctx.iteration, "max_iterations": cfg.max_iterations,
        "tools": _held_tools(ctx), "memory_scopes": list(ctx.memory_scopes),
        "skills": list(cfg.skills), "context": None,
    }
    runs = ctx.services.runs
    run = await runs.get(ctx.tenant_id, ctx.run_id)
    if run is not None:
        out["content_sha256"] = run.def_content_sha256
        out["skill_def_ids"] = run.skill_def_ids
    out["volumes"] = await _volumes(ctx)
    out["compaction"] = await _compaction(ctx, run.run_options if run is not None else None)
    usage: dict[str, Any] | None = ctx.turn_usage  # this turn's, when it commits with this call
    if usage is None:
        for event in reversed(await runs.events(ctx.tenant_id, ctx.run_id, 0, 5000)):
            if event.type == EventType.USAGE:
                usage = event.payload.get("usage") or {}
                break
    if usage is not None:
        used = sum(int(usage.get(k) or 0) for k in ("input_tokens", "cache_read_input_tokens",
                                                     "cache_creation_input_tokens"))
        window = usage.get("max_context_tokens")
        out["context"] = {
            "last_turn_input_tokens": used, "last_turn_output_tokens": int(usage.get("output_tokens") or 0),
            "max_context_tokens": window, "used_fraction": round(used / window, 4) if window else None,
        }
    return out


async def _compaction(ctx: ToolContext, run_options: dict[str, Any] | bool | None = False) -> dict[str, Any]:
    """The run's resolved compaction settings (the agent's < the run's)."""
    if run_options is False:
        run = await ctx.services.runs.get(ctx.tenant_id, ctx.run_id)
        run_options = run.run_options if run is not None else None
    over = (run_options or {}).get("compaction") if isinstance(run_options, dict) else None
    return Settings.resolve(ctx.agent_config.compaction, over).to_json()


async def _volumes(ctx: ToolContext) -> dict[str, Any]:
    """The agent's volumes with their effective modes, and how paths work."""
    service = ctx.services.volumes
    bound = await service.bindings(ctx.tenant_id, ctx.run_id, ctx.agent_config) if service is not None else []
    default = next((b.name for b in bound if b.default), bound[0].name if len(bound) == 1 else None)
    out: dict[str, Any] = {
        "bindings": [{"name": b.name, "mode": b.mode, "ephemeral": b.ephemeral, "default": b.name == default,
                      "source": b.source, **({"description": b.description} if b.description else {})}
                     for b in bound],
        "storage": service.storage.kind if service is not None and service.storage is not None else None,
        "paths": "relative to the volume root (e.g. src/main.py); absolute paths, ~ and .. that leave the "
                 "volume are refused; omit `volume` to use the default",
    }
    if not bound:
        out["filesystem"] = "none — no volume bound"
    missing = sorted({b.name for b in ctx.agent_config.volumes} - {b.name for b in bound})
    if missing:
        out["unavailable"] = missing  # not defined in this tenant, or not granted by the parent run
    return out


def _tool_entry(ctx: ToolContext, name: str) -> dict[str, Any]:
    entry = ctx.services.catalogue.get(name)
    if entry is None:
        return {"name": name}
    description, schema = entry
    return {"name": name, "description": description, "input_schema": schema}


async def _agents(ctx: ToolContext, prefix: Any = None) -> dict[str, Any]:
    if prefix is not None and not isinstance(prefix, str):
        raise ToolError("Context.agents: prefix must be a string")
    listing = await ctx.services.ops["AgentDef"].dispatch(ctx.tenant_id, {"op": "list"})
    static = ctx.services.config.agents
    runnable: dict[str, dict[str, Any]] = {}
    for s in listing["static"]:
        runnable[s["name"]] = {"name": s["name"], "source": "yaml", "def_id": None,
                               "content_sha256": s["content_sha256"],
                               "description": static[s["name"]].description}
    for d in listing["defs"]:
        if d["active"]:
            runnable[d["name"]] = {"name": d["name"], "source": "runtime", "def_id": d["def_id"],
                                   "version": d["version"], "content_sha256": d["content_sha256"],
                                   "description": d["description"]}
    names = [n for n in sorted(runnable) if not prefix or n.startswith(prefix)]
    return {"agents": [runnable[n] for n in names], "count": len(names)}


def _help(topic: Any, query: Any = None) -> dict[str, Any]:
    topics = help_topics()
    if query is not None:
        if not isinstance(query, str) or not query.strip():
            raise ToolError("Context.help: query must be a non-empty string")
        return {"query": query, "matches": help_search(topics, query), "ranking": "substring"}
    if topic is None or topic == "":
        return {"topics": [{"topic": t, "summary": _summary(text)} for t, text in topics.items()]}
    if not isinstance(topic, str) or topic not in topics:
        raise ToolError(f"Context.help: unknown topic {topic!r} (topics: {', '.join(topics)})")
    return {"topic": topic, "text": topics[topic]}


def help_search(topics: dict[str, str], query: str, limit: int = 8) -> list[dict[str, Any]]:
    """The help sections (a topic split at its `##` headings) holding the query's words, best first:
    `{topic_slug, heading, snippet, score}` (the share of the words a section holds). loomcycle
    ranks by embeddings when it has an embedder, else by this substring scan."""
    words = [w for w in query.lower().split() if w]
    found: list[dict[str, Any]] = []
    for slug, text in topics.items():
        heading, lines = slug, list[str]()
        for line in [*text.splitlines(), "## "]:
            if line.startswith("## "):
                body = "\n".join(lines).strip()
                hay = f"{heading}\n{body}".lower()
                score = sum(1 for w in words if w in hay) / len(words)
                if body and score > 0:
                    first = next((i for w in words if (i := hay.find(w)) >= 0), 0)
                    start = max(0, first - len(heading) - 80)
                    found.append({"topic_slug": slug, "heading": heading, "snippet": body[start:start + 240],
                                  "score": round(score, 4)})
                heading, lines = line[3:].strip(), []
            else:
                lines.append(line)
    found.sort(key=lambda m: (-m["score"], m["topic_slug"], m["heading"]))
    return found[:limit]


async def _capabilities(ctx: ToolContext) -> dict[str, Any]:
    cfg = ctx.agent_config
    embedder = ctx.services.vector_memory.embedder
    out: dict[str, Any] = {
        "tools_available": sorted(ctx.services.catalogue),
        "memory": {
            "scopes": list(ctx.memory_scopes),
            "embedder": {"driver": embedder.name, "model": embedder.model} if embedder is not None else None,
            "vector_search": None,
            "max_value_bytes": ctx.memory.max_value_bytes,
            "scope_quota_bytes": ctx.memory.max_scope_bytes,
            "agent_scope_quota_bytes": getattr(cfg, "memory_quota_bytes", None) or ctx.memory.max_scope_bytes,
        },
        "defs": {
            "families": ["AgentDef", "SkillDef", "ScheduleDef", "WebhookDef"],
            "agent_def_scopes": list(getattr(cfg, "agent_def_scopes", ()) or ()),
            "skill_def_scopes": list(getattr(cfg, "skill_def_scopes", ()) or ()),
        },
        "evaluation_scopes": list(getattr(cfg, "evaluation_scopes", ()) or ()),
        "help_topics": list(help_topics()),
    }
    out["memory"]["vector_search"] = embedder is not None and await ctx.memory.vectors_available()
    out["consolidation"] = consolidation_report(ctx)
    return out


def consolidation_report(ctx: ToolContext) -> dict[str, Any]:
    """loomcycle's `consolidation` capability: whether a consolidator is wired (a schedule starting
    an agent granted `memory_consolidation`; `available`: such a schedule is enabled) and the
    similarity bands in force (memory.add's: the bands treadle's fact writes use). treadle has no
    write verification or conflict pass for a consolidator to switch on: both false."""
    cfg = ctx.services.config
    granted = [s for s in cfg.scheduled_runs.values()
               if (a := cfg.agents.get(s.agent)) is not None and a.memory_consolidation]
    return {"available": any(s.enabled for s in granted), "configured": bool(granted),
            "merge_threshold": cfg.memory.add.merge_threshold, "related_threshold": cfg.memory.add.related_threshold,
            "verify_writes": False, "detect_conflicts": False}
