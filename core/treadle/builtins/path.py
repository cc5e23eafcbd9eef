"""Built-in `Path` (loomcycle's RFC AL): a Unix-like tree of names over this agent's Documents,
Memory entries and volumes (knowledge/pathtree.py). `scope` picks the tree: `agent` (default,
this agent's), `user` (the run's user), `tenant` (shared by the tenant); the tenant is always the
run's. As in loomcycle, `tools: [Path]` grants all three trees — a name is not a grant: the
resource behind it is still reached through its own tool and that tool's scopes.

Transactional: a dirent is a row of treadle's database, written in the step's transaction.
`POST /v1/_path` runs the same ops (`path_op`) for a principal instead of a run."""

from __future__ import annotations

from typing import Any

from treadle.builtins.args import refuse_unknown
from treadle.errors import ToolError
from treadle.knowledge.pathtree import KINDS, OPS, PathTree
from treadle.store.dirents import DirentStore, Tree
from treadle.tools.base import Park, ToolContext, ToolEffects, ToolResult

SCOPES = ("agent", "user", "tenant")
#: fields that apply to some ops only: given (not null/false) to another, they are refused
_ONLY = {"to": ("mv",), "recursive": ("ls", "rm"), "kind_filter": ("ls",), "resource_too": ("rm",)}

INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "op": {"type": "string", "enum": list(OPS), "description": "The operation."},
        "path": {
            "type": "string",
            "description": 'Absolute path, e.g. /docs/launch. Segments are [a-zA-Z0-9._-]; no "..".',
        },
        "to": {"type": "string", "description": "Destination path (mv only)."},
        "scope": {
            "type": "string",
            "enum": list(SCOPES),
            "description": "Which tree (default agent). user requires a user_id on the run; tenant is shared "
            "across the tenant.",
        },
        "recursive": {
            "type": "boolean",
            "description": "ls: list all descendants. rm: required to remove a path that has descendants.",
        },
        "kind_filter": {
            "type": "string",
            "enum": list(KINDS),
            "description": "ls: only entries of this kind (document/volume_mount/memory_entry/directory).",
        },
        "resource_too": {
            "type": "boolean",
            "description": "rm: also delete the backing resource. Not supported (refused: rm removes the name only).",
        },
    },
    "required": ["op"],
}


def check_fields(args: dict[str, Any]) -> None:
    refuse_unknown(args, INPUT_SCHEMA, "Path")
    op = args.get("op")
    for name, ops in _ONLY.items():
        if args.get(name) not in (None, False, "") and op not in ops:
            raise ToolError(f"Path.{op}: {name} applies to {', '.join(ops)} only", code="field_not_applicable")


async def path_op(dirents: DirentStore, tree: Tree, args: dict[str, Any]) -> dict[str, Any]:
    """One op on `tree` (resolved by the caller from the run or the principal, never the input)."""
    check_fields(args)
    return await PathTree(dirents).dispatch(tree, args)


def tree_of(ctx: ToolContext, scope: Any, tool: str, default: str) -> Tree:
    """The run's tree for `scope` (agent → the agent's name, user → the run's user, tenant → '')."""
    scope = scope or default
    if scope == "agent":
        return Tree(ctx.tenant_id, "agent", ctx.agent)
    if scope == "user":
        if not ctx.user_id:
            raise ToolError(f"{tool}: scope=user requires a user_id on the run", code="invalid_input")
        return Tree(ctx.tenant_id, "user", ctx.user_id)
    if scope == "tenant":
        return Tree(ctx.tenant_id, "tenant", "")
    raise ToolError(f"{tool}: unknown scope {scope!r} (agent | user | tenant)", code="invalid_input")


def dirents_of(ctx: ToolContext, tool: str) -> DirentStore:
    if ctx.services.dirents is None:
        raise ToolError(f"{tool}: the Path tree is not available in this runtime", code="path_unavailable")
    return ctx.services.dirents


class PathTool:
    name = "Path"
    effects: ToolEffects = "transactional"
    description = (
        "A Unix-like filesystem over your Memory, Volumes, and Documents. Address resources by human-readable "
        "paths (e.g. /docs/launch). Ops: resolve, ls, stat, mkdir (create an empty directory), mv, rm. Paths are "
        'scoped (agent/user/tenant, default agent) and tenant-isolated; segments are [a-zA-Z0-9._-], no "..".'
    )
    input_schema = INPUT_SCHEMA

    async def invoke(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult | Park:
        tree = tree_of(ctx, args.get("scope"), "Path", "agent")
        return ToolResult.json(await path_op(dirents_of(ctx, "Path"), tree, args))
