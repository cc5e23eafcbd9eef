"""Memory's consolidation ops (loomcycle's RFC BL P2, `internal/tools/builtin/memory.go`):
`cursor_get`, `cursor_scan`, `cursor_lease`, `cursor_advance`, `cursor_release`, `supersede`,
`pending_drain`, `pending_ack` — what a consolidator agent (loomcycle's memory bundle:
`memory/consolidator`, a code agent) walks a pass with. Rows: store/consolidation.py.

Default-deny behind a grant of their own, the agent's `memory_consolidation: true`, on top of
`memory_scopes`. The target (tenant, scope, scope_id) is the run's — never the model's; the lease
owner is the run id. `cursor_advance`, `supersede` and `pending_ack` change bookkeeping and need the
caller to hold the target's live lease; `cursor_advance` names a real settled chat of this target
whose settled time matches (±1 s) and records the store's time; the watermark only moves forward.
`cursor_scan` returns the target user's settled chats strictly after the watermark, oldest first,
never the pass's own agent's nor any `internal:` agent's.

All of them are writes or reads of treadle's own rows, run in the step's transaction
(transactional): a pass killed anywhere resumes from its recorded tool results and each op takes
effect once."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from treadle.errors import ToolError
from treadle.store.consolidation import ConsolidationStore
from treadle.tools.base import ToolContext

OPS = ("cursor_get", "cursor_scan", "cursor_lease", "cursor_advance", "cursor_release", "supersede",
       "pending_drain", "pending_ack")
#: the input fields only these ops read (Memory refuses them on its other ops)
FIELDS = ("lease_ttl_ms", "completed_at", "session_id", "ids")
SCHEMA: dict[str, Any] = {
    "lease_ttl_ms": {"type": "integer", "description": "cursor_lease: how long to hold the lease (ms; default 60 s, "
                                                       "at most an hour)"},
    "completed_at": {"type": "string", "description": "cursor_advance: the completed_at of a cursor_scan row"},
    "session_id": {"type": "string", "description": "cursor_advance: the session_id of the same cursor_scan row"},
    "ids": {"type": "array", "items": {"type": "string"}, "description": "pending_ack: ids from pending_drain"},
    "from_pending": {"type": "string", "description": "set: the pending_drain id this fact was distilled from "
                                                      "(its origin and source ids are taken from that item)"},
}
DEFAULT_LEASE_S = 60.0
MAX_LEASE_S = 3600.0
SCAN_DEFAULT, SCAN_MAX = 10, 50
DRAIN_DEFAULT, DRAIN_MAX = 50, 200
#: how far a cursor_advance completed_at may sit from the chat's real settled time
MAX_SKEW_S = 1.0
ORIGIN = "consolidator"


def granted(ctx: ToolContext) -> bool:
    return bool(getattr(ctx.agent_config, "memory_consolidation", False))


def internal_agents(ctx: ToolContext) -> list[str]:
    """The operator's `internal:` agents (treadle.yaml), plus the calling agent."""
    names = {name for name, cfg in ctx.services.config.agents.items() if cfg.internal}
    return sorted(names | {ctx.agent})


def store(ctx: ToolContext) -> ConsolidationStore:
    return ConsolidationStore(ctx.services.runs.pool)


async def run_op(ctx: ToolContext, op: str, scope: str, scope_id: str, args: dict[str, Any]) -> dict[str, Any]:
    if not granted(ctx):
        raise ToolError(f"Memory.{op}: requires the memory_consolidation grant (add memory_consolidation: true "
                        "to the agent config)", code="memory_consolidation_not_granted")
    rows, tenant, owner = store(ctx), ctx.tenant_id, ctx.run_id
    if op == "cursor_get":
        return (await rows.cursor(tenant, scope, scope_id)).to_api()
    if op == "cursor_lease":
        ttl = args.get("lease_ttl_ms")
        if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, int)):
            raise ToolError("Memory.cursor_lease: lease_ttl_ms must be an integer")
        seconds = min(ttl / 1000, MAX_LEASE_S) if ttl and ttl > 0 else DEFAULT_LEASE_S
        cursor, acquired = await rows.lease(tenant, scope, scope_id, owner, seconds)
        return {**cursor.to_api(), "acquired": acquired, "owner": owner}
    if op == "cursor_release":
        await rows.release(tenant, scope, scope_id, owner)
        return {"ok": True}
    if op == "cursor_scan":
        limit = _limit(args, SCAN_DEFAULT, SCAN_MAX)
        cursor = await rows.cursor(tenant, scope, scope_id)
        # scope user: the target's chats; any other scope owns bookkeeping, not chats — nothing
        found = await rows.scan(tenant, scope_id, internal_agents(ctx), cursor, limit + 1) if scope == "user" else []
        return {"sessions": [{"session_id": sid, "completed_at": at.isoformat()} for sid, at in found[:limit]],
                "truncated": len(found) > limit}
    if op == "pending_drain":
        items = await rows.pending(tenant, scope, scope_id, _limit(args, DRAIN_DEFAULT, DRAIN_MAX))
        return {"pending": [p.to_api() for p in items]}
    # the ops that change bookkeeping: the caller holds the target's live lease
    cursor = await rows.cursor(tenant, scope, scope_id)
    if cursor.leased_by != owner or not cursor.lease_live:
        raise ToolError(f"Memory.{op}: not lease owner — take this target's lease with cursor_lease (and stop if "
                        f"it reports acquired=false) before {op}", code="consolidation_lease_not_held")
    if op == "supersede":
        key = args.get("key")
        if not isinstance(key, str) or not key:
            raise ToolError("Memory.supersede: missing required field: key")
        await rows.supersede(tenant, scope, scope_id, key)
        return {"ok": True}
    if op == "pending_ack":
        ids = args.get("ids")
        if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
            raise ToolError("Memory.pending_ack: missing required field: ids (the pending_drain ids)")
        await rows.ack(tenant, scope, scope_id, ids)
        return {"ok": True, "acked": len(ids)}
    return await _advance(ctx, rows, scope, scope_id, args)


async def _advance(ctx: ToolContext, rows: ConsolidationStore, scope: str, scope_id: str,
                   args: dict[str, Any]) -> dict[str, Any]:
    at_text, sid = args.get("completed_at"), args.get("session_id")
    if not isinstance(at_text, str) or not at_text:
        raise ToolError("Memory.cursor_advance: missing required field: completed_at")
    if not isinstance(sid, str) or not sid:
        raise ToolError("Memory.cursor_advance: missing required field: session_id — the watermark names the chat "
                        "it stops at; copy the pair from a cursor_scan row")
    try:
        at = datetime.fromisoformat(at_text.replace("Z", "+00:00"))
    except ValueError:
        raise ToolError("Memory.cursor_advance: completed_at must be an RFC 3339 timestamp") from None
    if at.tzinfo is None:
        raise ToolError("Memory.cursor_advance: completed_at must carry its offset (RFC 3339)")
    if at > datetime.now(UTC):
        raise ToolError("Memory.cursor_advance: completed_at is in the future — the watermark only moves to a chat "
                        "that has already finished")
    exists, owner_user, settled = await rows.settled(ctx.tenant_id, sid)
    if not exists:
        raise ToolError(f"Memory.cursor_advance: no chat {sid!r} in this tenant — copy the pair from a cursor_scan row")
    if scope == "user" and owner_user != scope_id:
        raise ToolError(f"Memory.cursor_advance: chat {sid!r} does not belong to this memory target")
    if settled is None:
        raise ToolError(f"Memory.cursor_advance: chat {sid!r} has not finished yet — advancing past a live chat would "
                        "skip whatever it says next")
    if abs((settled - at).total_seconds()) > MAX_SKEW_S:
        raise ToolError(f"Memory.cursor_advance: completed_at does not match chat {sid!r} (it settled at "
                        f"{settled.isoformat()}) — copy the pair verbatim from a cursor_scan row")
    if not await rows.advance(ctx.tenant_id, scope, scope_id, ctx.run_id, settled, sid):
        raise ToolError("Memory.cursor_advance: not lease owner", code="consolidation_lease_not_held")
    return {"ok": True}


def _limit(args: dict[str, Any], default: int, most: int) -> int:
    limit = args.get("limit")
    if limit is None or isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
        return default
    return min(limit, most)


async def origin(ctx: ToolContext, scope: str, scope_id: str, from_pending: Any) -> dict[str, Any] | None:
    """The server-stamped provenance of a consolidator's `set`: origin `consolidator`, or with
    `from_pending` the queued item's origin and source ids. None: not a consolidator's write."""
    if from_pending is not None and not granted(ctx):
        raise ToolError("Memory.set: from_pending requires the memory_consolidation grant",
                        code="memory_consolidation_not_granted")
    if not granted(ctx):
        return None
    if from_pending is None:
        return {"origin": ORIGIN}
    if not isinstance(from_pending, str) or not from_pending:
        raise ToolError("Memory.set: from_pending must be a pending_drain id")
    item = await store(ctx).pending_item(ctx.tenant_id, scope, scope_id, from_pending)
    if item is None:
        raise ToolError(f"Memory.set: from_pending {from_pending!r} is not a queued item of this target")
    out = {"origin": item.origin or ORIGIN}
    out.update({k: v for k, v in (("source_session_id", item.source_session_id),
                                  ("source_run_id", item.source_run_id)) if v})
    return out


def pending_id(run_id: str, tool_use_id: str) -> str:
    """A queued `add`'s id: the same call re-run (an external step attempt) queues nothing twice."""
    return "pend_" + hashlib.sha256(f"{run_id}\x1f{tool_use_id}".encode()).hexdigest()[:24]


def consolidator_deployed(agents: Sequence[Any]) -> bool:
    """Whether treadle.yaml holds a consolidator (an agent granted memory_consolidation)."""
    return any(getattr(a, "memory_consolidation", False) for a in agents)


def payload_of(messages: Any, metadata: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"messages": messages}
    if metadata is not None:
        out["metadata"] = metadata
    json.dumps(out)  # a queued payload is JSON (raises TypeError on anything else)
    return out
