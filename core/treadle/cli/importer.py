"""`treadle import claude-code --from .claude [--write]`: Claude Code subagents and skills as
treadle defs.

    .claude/agents/<name>.md         frontmatter (name, description, tools, model, skills) + the
                                     system prompt → an AgentDef
    .claude/skills/<name>/SKILL.md   frontmatter (name, description, allowed-tools) + the body → a SkillDef
    .mcp.json (next to .claude)      each HTTP server → an MCPServerDef (stdio, SSE: listed as dropped)

Without `--write` it is a dry run: it prints what it would create and everything that does not
carry over (the lossy list). With `--write` it creates the defs on a running treadle (`--url`,
bearer from TREADLE_AUTH_TOKEN): skills first, then agents; a name that exists with another body
gets a new promoted version (a fork); an identical one is left as it is.

Claude Code grants every tool when `tools:` is absent; treadle is default-deny, so such an agent
gets none (listed as lossy). Claude Code's file and shell tools map to treadle's workspace tools
(Read, Write, Edit, Glob, Grep, NotebookEdit, Bash; MultiEdit, LS, NotebookRead and Bash are
narrowed, each with why); `--volume NAME` binds such an agent to a volume (rw when a tool writes),
without it the tools are kept and reach no files. Tools without a treadle equivalent (background
shells, todo lists, slash commands, plan mode) are dropped, each with why;
`mcp__<server>__<tool>` names carry over as they are (the server must be configured in
treadle). `model: sonnet | opus | haiku` becomes a model alias of that name (declare it under
treadle.yaml `models:`); `inherit` or none becomes `--default-model`.

Skills stay on demand: an agent whose `tools:` names `Skill` gets treadle's Skill tool (`list`,
`invoke`; with no `skills:` it may load every imported skill); the skills its `skills:` lists are
bundled into its prompt, as Claude Code preloads them into a subagent.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace as Args
from typing import Any

import click
import yaml

#: Claude Code tool → (treadle tool or None, why: how it is narrowed, or why it is dropped)
TOOLS: dict[str, tuple[str | None, str]] = {
    "WebFetch": ("WebFetch", ""), "WebSearch": ("WebSearch", ""), "Task": ("Agent", ""), "Agent": ("Agent", ""),
    "Skill": ("Skill", ""),
    "Read": ("Read", ""), "Write": ("Write", ""), "Edit": ("Edit", ""), "Glob": ("Glob", ""), "Grep": ("Grep", ""),
    "NotebookEdit": ("NotebookEdit", ""),
    "MultiEdit": ("Edit", "one replacement per call (treadle's Edit; several calls for several edits)"),
    "LS": ("Glob", "a directory is listed with a Glob pattern (dir/*)"),
    "NotebookRead": ("Read", "a notebook is read as its JSON text"),
    "Bash": ("Bash", "treadle's restricted Bash: sidecar only, off until treadle.yaml `bash: {enabled: true}`, "
                     "runs in the volume, no background shells (docs/workspace.md)"),
    "BashOutput": (None, "no background shells in treadle"), "KillShell": (None, "no background shells in treadle"),
    "KillBash": (None, "no background shells in treadle"),
    "TodoWrite": (None, "no todo list tool in treadle"), "SlashCommand": (None, "no slash commands in treadle"),
    "ExitPlanMode": (None, "no plan mode in treadle"),
}
#: the earlier table (tool → treadle tool or None)
TOOL_MAP: dict[str, str | None] = {name: mapped for name, (mapped, _) in TOOLS.items()}
#: treadle's workspace tools: they reach files only through a volume binding (docs/workspace.md)
FILE_TOOLS = {"Read", "Write", "Edit", "Glob", "Grep", "NotebookEdit", "Bash"}
WRITING_TOOLS = {"Write", "Edit", "NotebookEdit", "Bash"}
AGENT_KEYS = {"name", "description", "tools", "model", "skills"}
SKILL_KEYS = {"name", "description", "allowed-tools"}
NAME = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


@dataclass
class Planned:
    kind: str  # "agent" | "skill"
    name: str
    source: str
    overlay: dict[str, Any]
    lossy: list[str] = field(default_factory=list)
    #: the tools carried over as they are
    mapped: list[str] = field(default_factory=list)


def split_frontmatter(text: str) -> tuple[dict[str, Any], str]:
    """(frontmatter, body) of a Markdown file with a `---` YAML header (none: {}, the text)."""
    m = re.match(r"^---\s*\n(.*?)\n---\s*(?:\n|$)", text, re.S)
    if not m:
        return {}, text
    meta = yaml.safe_load(m.group(1)) or {}
    if not isinstance(meta, dict):
        raise ValueError("the frontmatter is not a YAML mapping")
    return meta, text[m.end():]


def tool_list(value: Any) -> list[str]:
    if value is None:
        return []
    items = value.split(",") if isinstance(value, str) else list(value)
    return [str(t).strip() for t in items if str(t).strip()]


def map_tools(names: list[str], lossy: list[str], mapped: list[str] | None = None) -> list[str]:
    """Claude Code tool names → treadle's; `mapped` gets a line per tool carried over, `lossy` one
    per tool narrowed (what changes) or dropped (why)."""
    out: list[str] = []
    for name in names:
        if name.startswith("mcp__"):
            out.append(name)
            lossy.append(f"tool {name}: kept; the MCP server must be configured in treadle (mcp_servers or an "
                         "MCPServerDef)")
            continue
        target, why = TOOLS.get(name, (None, "not a Claude Code tool treadle knows"))
        if target is None:
            lossy.append(f"tool {name}: dropped ({why})")
            continue
        if why:
            lossy.append(f"tool {name} → {target}: narrowed ({why})")
        elif mapped is not None:
            mapped.append(f"{name} → {target}" if target != name else name)
        if target not in out:
            out.append(target)
    return out


def bind_volume(overlay: dict[str, Any], volume: str | None, lossy: list[str]) -> None:
    """An agent with file tools gets `volumes: [{name, mode}]` (rw when a tool writes) from
    `--volume`; without it the tools are kept and say they are bound to no volume."""
    files = [t for t in overlay.get("tools", []) if t in FILE_TOOLS]
    if not files:
        return
    if volume is None:
        lossy.append(f"tools {', '.join(files)}: kept, but bound to no volume — pass --volume NAME (a volume "
                     "declared under treadle.yaml volumes:) so they reach files")
        return
    mode = "rw" if any(t in WRITING_TOOLS for t in files) else "ro"
    overlay["volumes"] = [{"name": volume, "mode": mode}]


def plan_agent(path: Path, default_model: str, volume: str | None = None) -> Planned:
    meta, body = split_frontmatter(path.read_text())
    name = str(meta.get("name") or path.stem)
    lossy: list[str] = []
    if not NAME.match(name):
        raise ValueError(f"{path}: name {name!r} is not a treadle name ([A-Za-z0-9_-]{{1,128}})")
    overlay: dict[str, Any] = {"system_prompt": body.strip()}
    if meta.get("description"):
        overlay["description"] = str(meta["description"])[:4096]
    model = str(meta.get("model") or "inherit")
    if model == "inherit":
        overlay["model"] = default_model
        lossy.append(f"model {model}: uses --default-model {default_model!r}")
    else:
        overlay["model"] = model
        lossy.append(f"model {model}: a treadle model alias of that name must be declared under models:")
    mapped: list[str] = []
    if "tools" in meta:
        overlay["tools"] = map_tools(tool_list(meta.get("tools")), lossy, mapped)
        bind_volume(overlay, volume, lossy)
    else:
        overlay["tools"] = []
        lossy.append("tools: absent (Claude Code grants every tool); treadle is default-deny: none granted")
    skills = tool_list(meta.get("skills"))
    if skills:
        overlay["skills"] = skills
    for key in sorted(set(meta) - AGENT_KEYS):
        lossy.append(f"frontmatter {key}: not imported")
    return Planned("agent", name, str(path), overlay, lossy, mapped)


def plan_skill(path: Path) -> Planned:
    meta, body = split_frontmatter(path.read_text())
    name = str(meta.get("name") or path.parent.name)
    lossy: list[str] = []
    if not NAME.match(name):
        raise ValueError(f"{path}: name {name!r} is not a treadle name ([A-Za-z0-9_-]{{1,128}})")
    overlay: dict[str, Any] = {"body": body.strip()}
    if meta.get("description"):
        overlay["description"] = str(meta["description"])[:4096]
    mapped: list[str] = []
    if "allowed-tools" in meta:
        overlay["tools"] = map_tools(tool_list(meta.get("allowed-tools")), lossy, mapped)
    others = sorted(str(p.relative_to(path.parent)) for p in path.parent.rglob("*") if p.is_file() and p != path)
    if others:
        lossy.append(f"{len(others)} other file(s) of the skill not imported: {', '.join(others[:10])}"
                     + (" …" if len(others) > 10 else ""))
    for key in sorted(set(meta) - SKILL_KEYS):
        lossy.append(f"frontmatter {key}: not imported")
    return Planned("skill", name, str(path), overlay, lossy, mapped)


MCP_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
ENV_REF = re.compile(r"\$\{(?!run\.credentials\.)([^}]*)\}")


def plan_mcp(path: Path) -> list[Planned]:
    """`.mcp.json` (`{"mcpServers": {name: {type, url, headers} | {command, args, env}}}`): an
    HTTP server becomes an MCPServerDef; a stdio one cannot (a def must not start processes) and
    an SSE one is not spoken by treadle: both are listed as dropped, with what to do."""
    data = json.loads(path.read_text())
    servers = data.get("mcpServers") if isinstance(data, dict) else None
    if not isinstance(servers, dict):
        raise ValueError(f"{path}: no mcpServers object")
    items: list[Planned] = []
    for name, spec in sorted(servers.items()):
        if not isinstance(spec, dict):
            raise ValueError(f"{path}: mcpServers.{name} is not an object")
        kind = str(spec.get("type") or ("stdio" if spec.get("command") else "http"))
        lossy: list[str] = []
        item = Planned("mcp", name, str(path), {}, lossy)
        if not MCP_NAME.match(name) or "__" in name:
            lossy.append(f"server {name}: dropped (a treadle MCP server name matches [A-Za-z0-9_-]{{1,64}} "
                         "without '__')")
        elif kind == "stdio":
            lossy.append("server: dropped (stdio: an MCPServerDef must not start processes) — declare it in "
                         "treadle.yaml mcp_servers: {transport: stdio, command, args, env} (the sidecar only)")
        elif kind == "sse":
            lossy.append("server: dropped (SSE transport: treadle speaks Streamable HTTP; use the server's "
                         "Streamable HTTP URL if it has one)")
        elif kind == "http":
            headers = {str(k): str(v) for k, v in (spec.get("headers") or {}).items()}
            item.overlay = {"transport": "http", "url": str(spec.get("url") or "")}
            if headers:
                item.overlay["headers"] = headers
            item.mapped.append(f"{name} (http) → MCPServerDef")
            for key, value in sorted(headers.items()):
                for var in ENV_REF.findall(value):
                    lossy.append(f"header {key}: ${{{var}}} is not expanded by treadle (Claude Code reads the "
                                 f"environment) — use ${{run.credentials.NAME}} and pass the run's credentials")
        else:
            lossy.append(f"server: dropped (type {kind!r} unknown)")
        for key in sorted(set(spec) - {"type", "url", "headers", "command", "args", "env"}):
            lossy.append(f"key {key}: not imported")
        items.append(item)
    return items


def plan(root: Path, default_model: str, volume: str | None = None) -> list[Planned]:
    """MCP servers (the project's `.mcp.json`), then skills (agents may list them), then agents,
    each kind in name order."""
    if not root.is_dir():
        raise ValueError(f"{root}: not a directory (the .claude folder of a project, or ~/.claude)")
    skills = [plan_skill(p) for p in sorted((root / "skills").glob("*/SKILL.md"))]
    agents = [plan_agent(p, default_model, volume) for p in sorted((root / "agents").glob("*.md"))]
    mcp_json = root.resolve().parent / ".mcp.json"  # the project's, next to its .claude folder
    servers = plan_mcp(mcp_json) if mcp_json.is_file() else []
    return servers + skills + agents


def print_plan(items: list[Planned], out: Any = sys.stdout) -> None:
    for item in items:
        label = {"agent": "AgentDef", "skill": "SkillDef", "mcp": "MCPServerDef"}[item.kind]
        if item.kind == "mcp" and not item.overlay:
            print(f"mcp {item.source} → (not imported) {item.name}", file=out)
            for note in item.lossy:
                print(f"  lossy: {note}", file=out)
            continue
        print(f"{item.kind} {item.source} → {label} {item.name}", file=out)
        if item.kind == "agent":
            print(f"  tools: {', '.join(item.overlay['tools']) or '(none)'}; model: {item.overlay['model']}", file=out)
            for binding in item.overlay.get("volumes", []):
                print(f"  volume: {binding['name']} ({binding['mode']})", file=out)
        if item.mapped:
            print(f"  mapped: {', '.join(item.mapped)}", file=out)
        for note in item.lossy:
            print(f"  lossy: {note}", file=out)
    if not items:
        print("nothing to import (no agents/*.md, no skills/*/SKILL.md)", file=out)


def write(items: list[Planned], url: str, token: str | None, discover: bool = True) -> list[dict[str, Any]]:
    import httpx

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    results: list[dict[str, Any]] = []
    with httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=60) as client:
        for item in items:
            if item.kind == "mcp" and not item.overlay:
                continue  # dropped (the plan says why)
            path = {"agent": "/v1/_agentdef", "skill": "/v1/_skilldef", "mcp": "/v1/_mcpserverdef"}[item.kind]
            extra = {"discover": discover} if item.kind == "mcp" else {}
            resp = client.post(path, json={"op": "create", "name": item.name, "overlay": item.overlay, **extra})
            action = "created"
            if resp.status_code == 409:  # exists with another body: a new, promoted version
                resp = client.post(path, json={"op": "fork", "name": item.name, "overlay": item.overlay,
                                               "promote": True, **extra})
                action = "forked"
            body = resp.json()
            if resp.status_code >= 400:
                results.append({"kind": item.kind, "name": item.name, "ok": False, **body})
                continue
            if body.get("deduplicated"):
                action = "unchanged"
            results.append({"kind": item.kind, "name": item.name, "ok": True, "action": action,
                            "def_id": body.get("def_id"), "version": body.get("version")})
    return results


def cmd_import(args: Args) -> int:
    try:
        items = plan(Path(args.source), args.default_model, args.volume)
    except (ValueError, OSError, yaml.YAMLError) as exc:
        print(f"import: {exc}", file=sys.stderr)
        return 2
    if args.json and not args.write:
        print(json.dumps([item.__dict__ for item in items], indent=2))
        return 0
    print_plan(items, sys.stderr if args.json else sys.stdout)
    if not args.write:
        print("dry run: nothing written (pass --write to create these defs on a running treadle)")
        return 0
    url = args.url or os.environ.get("TREADLE_URL") or "http://127.0.0.1:8787"
    results = write(items, url, os.environ.get("TREADLE_AUTH_TOKEN"), args.discover)
    for r in results:
        if r["ok"]:
            print(f"{r['action']} {r['kind']} {r['name']} (def {r['def_id']}, version {r['version']})")
        else:
            print(f"FAILED {r['kind']} {r['name']}: {r.get('code')}: {r.get('error')}")
    if args.json:
        print(json.dumps(results, indent=2))
    return 0 if all(r["ok"] for r in results) else 1


@click.command("import", help="import definitions from another tool (claude-code)")
@click.argument("tool", type=click.Choice(["claude-code"]))
@click.option("--from", "source", default=".claude", show_default=True, help="the .claude folder")
@click.option("--write", is_flag=True, help="create the defs on a running treadle (default: dry run)")
@click.option("--url", help="the treadle to write to (default: $TREADLE_URL, else http://127.0.0.1:8787)")
@click.option("--default-model", default="sonnet", show_default=True,
              help="the model (alias) for agents with model inherit or none")
@click.option("--volume", help="bind agents with file tools (Read, Write, Edit, Grep, Glob, Bash, …) to this "
              "volume (declared under treadle.yaml volumes:); rw when one of their tools writes")
@click.option("--discover/--no-discover", default=True, show_default=True,
              help="list an imported MCP server's tools when its MCPServerDef is created (--no-discover: record it "
              "without tools; `rediscover` later)")
@click.option("--json", "json_", is_flag=True, help="print the plan (or the results) as JSON")
def import_command(json_: bool, **kw: Any) -> int:
    return cmd_import(Args(json=json_, **kw))
