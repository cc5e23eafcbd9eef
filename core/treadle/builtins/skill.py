"""Built-in `Skill`: list the skills this agent may use and load one's body on demand.

Skills on demand keep the system prompt small: an agent with a long library pulls in the one it
needs as a tool result, which stays in the conversation for the rest of the run. What the agent
may see and load is its `skills:` allowlist (domain/skillmatch.py: `review/*`, `-review/secret`,
empty = all). An agent holds this tool when it names it in `tools:` or when its `skills:` has a
pattern entry (engine/agents.py adds it then).

Versions: the run pinned, at its start, every skill its allowlist admitted (the promoted SkillDef
or the treadle.yaml one, substrate/resolve.py), so a skill forked or promoted later never changes a
running run; a skill that did not exist at the start is loaded at its current version. A skill's
`tools` must be tools the agent holds itself — a skill narrows, never widens (refused otherwise).
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Any

from treadle.domain import skillmatch
from treadle.errors import ToolError
from treadle.tools.base import Park, ToolContext, ToolEffects, ToolResult

OPS = ("invoke", "list")
YAML_PIN = "yaml"
MISSING_PIN = "missing"


class SkillTool:
    name = skillmatch.SKILL_TOOL
    effects: ToolEffects = "transactional"  # reads treadle's database only
    description = (
        "Discover and load skills (named instruction sets) on demand. op: list (pattern?: a /-glob such as "
        "doc/*) → the skills you may use [{name, description}]; invoke (name, e.g. doc/redactor; the default "
        "op) → the skill's body, for the rest of this run. Your skills: allowlist decides which skills you may "
        "use; a skill's tools must be tools you hold. Guide: Context op=help topic=skills."
    )
    input_schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "op": {"type": "string", "enum": list(OPS), "description": "invoke (default) | list"},
            "name": {"type": "string", "description": "invoke: the skill to load (/-grouped names allowed)"},
            "pattern": {"type": "string", "description": "list: an optional /-glob filter (doc/*, marketing/**)"},
        },
        "additionalProperties": False,
    }

    async def invoke(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult | Park:
        unknown = sorted(set(args) - {"op", "name", "pattern"})
        if unknown:
            raise ToolError(f"Skill: unknown field(s) {', '.join(unknown)} (fields: op, name, pattern)")
        op = args.get("op") or "invoke"
        if op not in OPS:
            raise ToolError(f"Skill: unknown op {op!r} (want invoke or list)")
        allowlist = list(ctx.agent_config.skills)
        if op == "list":
            pattern = _opt_str(args, "pattern")
            if pattern is not None and (problem := skillmatch.pattern_problem(pattern)) is not None:
                raise ToolError(f"Skill.list: {problem}")
            return ToolResult.json({"skills": await _listing(ctx, allowlist, pattern)})
        name = _opt_str(args, "name")
        if not name:
            raise ToolError("Skill.invoke: name (the skill to load) is required")
        if (problem := skillmatch.name_problem(name)) is not None:
            raise ToolError(f"Skill.invoke: {problem}")
        if not skillmatch.allowed(allowlist, name):
            raise ToolError(f"Skill.invoke: skill {name!r} is not permitted by this agent's skills: allowlist")
        body, tools, source = await _resolve(ctx, name)
        widening = [t for t in tools if not _held(t, ctx)]
        if widening:
            raise ToolError(f"Skill.invoke: skill {name!r} ({source}) needs tools {widening} this agent does not "
                            "hold — a skill cannot widen the agent's tools")
        return ToolResult(body)


def _opt_str(args: dict[str, Any], key: str) -> str | None:
    v = args.get(key)
    if v is None:
        return None
    if not isinstance(v, str):
        raise ToolError(f"Skill: {key} must be a string")
    return v.strip()


def _held(tool: str, ctx: ToolContext) -> bool:
    held = [*ctx.agent_config.tools, skillmatch.SKILL_TOOL]
    return any(tool == t or fnmatchcase(tool, t) for t in held)


async def _pins(ctx: ToolContext) -> dict[str, str]:
    run = await ctx.services.runs.get(ctx.tenant_id, ctx.run_id)
    return dict(run.skill_def_ids or {}) if run is not None else {}


async def _resolve(ctx: ToolContext, name: str) -> tuple[str, list[str], str]:
    """(body, tools, where it came from) of the version this run loads."""
    services = ctx.services
    pin = (await _pins(ctx)).get(name)
    if pin is not None and pin not in (YAML_PIN, MISSING_PIN):
        record = await services.defs.get(ctx.tenant_id, "skill", def_id=pin)
        if record is not None:
            return str(record.body.get("body", "")), list(record.body.get("tools") or []), f"SkillDef {pin}"
    if pin != YAML_PIN:
        record = await services.defs.get(ctx.tenant_id, "skill", name=name)
        if record is not None:
            return (str(record.body.get("body", "")), list(record.body.get("tools") or []),
                    f"SkillDef {record.def_id}")
    spec = services.config.skills.get(name)
    if spec is not None:
        return spec.body, list(spec.tools), "treadle.yaml"
    known = sorted(e["name"] for e in await _listing(ctx, list(ctx.agent_config.skills), None))
    hint = f" (you may use: {', '.join(known[:10])}{', …' if len(known) > 10 else ''})" if known else ""
    raise ToolError(f"Skill.invoke: unknown skill {name!r}{hint}")


async def _listing(ctx: ToolContext, allowlist: list[str], pattern: str | None) -> list[dict[str, Any]]:
    """The catalogue (treadle.yaml skills + the tenant's promoted SkillDefs) the allowlist and the
    pattern admit, sorted by name."""
    catalogue: dict[str, str] = {n: s.description for n, s in ctx.services.config.skills.items()}
    for name, (_, description) in (await ctx.services.defs.active_versions(ctx.tenant_id, "skill")).items():
        catalogue[name] = description
    out = []
    for name in sorted(catalogue):
        if not skillmatch.allowed(allowlist, name):
            continue
        if pattern and not skillmatch.allowed([pattern], name):
            continue
        out.append({"name": name, **({"description": catalogue[name]} if catalogue[name] else {})})
    return out
