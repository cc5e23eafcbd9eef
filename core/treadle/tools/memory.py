"""Built-in `Memory`: a small key/value store per scope (agent, user, tenant), with optional TTL."""

from __future__ import annotations

import json
from typing import Any

from treadle.errors import ToolError
from treadle.tools.args import optional_ttl
from treadle.tools.base import Park, ToolContext, ToolResult

MAX_VALUE_BYTES = 64 * 1024
MAX_KEY_LEN = 512
OPS = ("set", "get", "delete", "list", "incr")
SCOPES = ("agent", "user", "tenant")


class MemoryTool:
    name = "Memory"
    description = (
        "Persistent key/value memory. op: set|get|delete|list|incr. scope: agent (shared by every run "
        "of this agent), user (this run's user), tenant (everyone in the tenant; needs permission). "
        "set takes value (any JSON) and optional ttl_seconds; list takes optional prefix and limit; "
        "incr takes optional delta (default 1)."
    )
    input_schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "op": {"type": "string", "enum": list(OPS)},
            "scope": {"type": "string", "enum": list(SCOPES)},
            "key": {"type": "string"},
            "value": {},
            "ttl_seconds": {"type": "number", "exclusiveMinimum": 0},
            "prefix": {"type": "string"},
            "limit": {"type": "integer", "minimum": 1, "maximum": 1000},
            "delta": {"type": "integer"},
        },
        "required": ["op", "scope"],
    }

    async def invoke(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult | Park:
        op = args.get("op")
        if op not in OPS:
            raise ToolError(f"Memory: op must be one of {', '.join(OPS)}")
        scope = args.get("scope")
        if scope not in SCOPES:
            raise ToolError(f"Memory: scope must be one of {', '.join(SCOPES)}")
        if scope not in ctx.memory_scopes:
            raise ToolError(
                f"Memory: scope {scope!r} is not permitted for agent {ctx.agent!r}"
                f" (its memory_scopes: {', '.join(ctx.memory_scopes) or 'none'})"
            )
        scope_id = _scope_id(ctx, scope)
        mem, tenant = ctx.memory, ctx.tenant_id
        ttl = _ttl(args)

        if op == "list":
            prefix = args.get("prefix") or ""
            if not isinstance(prefix, str):
                raise ToolError("Memory.list: prefix must be a string")
            limit = args.get("limit", 100)
            if not isinstance(limit, int) or not 1 <= limit <= 1000:
                raise ToolError("Memory.list: limit must be an integer in 1..1000")
            entries = await mem.list(tenant, scope, scope_id, prefix, limit)
            return ToolResult.json({"scope": scope, "entries": entries, "count": len(entries)})

        key = _key(args)
        if op == "set":
            if "value" not in args:
                raise ToolError("Memory.set: value is required")
            size = len(json.dumps(args["value"]).encode())
            if size > MAX_VALUE_BYTES:
                raise ToolError(f"Memory.set: value is {size} bytes; the limit is {MAX_VALUE_BYTES}")
            await mem.set(tenant, scope, scope_id, key, args["value"], ttl)
            return ToolResult.json({"ok": True, "key": key, "scope": scope})
        if op == "get":
            found, value = await mem.get(tenant, scope, scope_id, key)
            return ToolResult.json({"found": found, "key": key, "value": value})
        if op == "delete":
            deleted = await mem.delete(tenant, scope, scope_id, key)
            return ToolResult.json({"deleted": deleted, "key": key})
        delta = args.get("delta", 1)
        if not isinstance(delta, int) or isinstance(delta, bool):
            raise ToolError("Memory.incr: delta must be an integer")
        value = await mem.incr(tenant, scope, scope_id, key, delta, ttl)
        if value is None:
            raise ToolError(f"Memory.incr: the value at {key!r} is not an integer")
        return ToolResult.json({"key": key, "value": value})


def _scope_id(ctx: ToolContext, scope: str) -> str:
    if scope == "agent":
        return ctx.agent
    if scope == "user":
        if not ctx.user_id:
            raise ToolError("Memory: scope 'user' needs a run with a user_id")
        return ctx.user_id
    return ""


def _key(args: dict[str, Any]) -> str:
    key = args.get("key")
    if not isinstance(key, str) or not key:
        raise ToolError("Memory: key is required (a non-empty string)")
    if len(key) > MAX_KEY_LEN:
        raise ToolError(f"Memory: key is longer than {MAX_KEY_LEN} characters")
    return key


def _ttl(args: dict[str, Any]) -> float | None:
    return optional_ttl(args, "Memory")
