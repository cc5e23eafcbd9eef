"""Built-in `Interruption`: ask a human and park until answered, declined, cancelled or expired.

- `ask` (question, options?, context?, priority?, timeout_ms?) records an interruption (its id
  derived from the tool call, so a re-invocation finds the same one), emits an
  `interruption_pending` event and parks the run on the interruption's wait key with the
  timeout as deadline. `POST /v1/runs/{id}/interrupts/{interrupt_id}/resolve` settles it and
  pokes the key; the deadline (swept) settles it as `timed_out`. The call's result is
  `{interrupt_id, status, answer, resolved_by, resolved_at}`.
- `notify` (message, priority?) records an `interruption_notify` event; nothing waits.
- `cancel` (interrupt_id) cancels a pending interruption of this run.
"""

from __future__ import annotations

from typing import Any

from treadle.config import InterruptionConfig
from treadle.domain.events import EventType
from treadle.errors import ToolError
from treadle.store.interrupts import InterruptStore, interrupt_id, interrupt_key
from treadle.tools.base import Park, ToolContext, ToolEffects, ToolResult

OPS = ("ask", "notify", "cancel")
PRIORITIES = ("low", "normal", "high")
MAX_OPTIONS = 32
MAX_TEXT = 16_000


class InterruptionTool:
    name = "Interruption"
    effects: ToolEffects = "transactional"  # every write goes through the step's transaction
    description = (
        "Ask a human and wait for the answer without holding resources. op: ask (question, options?, context?, "
        "priority low|normal|high, timeout_ms? default 1 h, max 24 h unless the operator set others) → "
        "{interrupt_id, status "
        "resolved|declined|timed_out|cancelled, answer}; notify (message) → records a notification; "
        "cancel (interrupt_id) → cancels a pending question."
    )
    input_schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "op": {"type": "string", "enum": list(OPS)},
            "question": {"type": "string"},
            "options": {"type": "array", "items": {"type": "string"}, "maxItems": MAX_OPTIONS},
            "context": {"type": "string"},
            "priority": {"type": "string", "enum": list(PRIORITIES)},
            "timeout_ms": {"type": "integer", "minimum": 1},
            "message": {"type": "string"},
            "interrupt_id": {"type": "string"},
        },
        "required": ["op"],
    }

    async def invoke(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult | Park:
        op = args.get("op")
        if op not in OPS:
            raise ToolError(f"Interruption: op must be one of {', '.join(OPS)}")
        if op == "notify":
            message = _required(args, "message")
            result = ToolResult.json({"notified": True})
            result.events.append((EventType.INTERRUPTION_NOTIFY, {"message": message, "priority": _priority(args)}))
            return result
        store = ctx.services.interrupts
        if op == "cancel":
            return await _cancel(ctx, store, args)
        return await _ask(ctx, store, args, ctx.services.config.interruption)


async def _ask(ctx: ToolContext, store: InterruptStore, args: dict[str, Any], bounds: InterruptionConfig
               ) -> ToolResult | Park:
    question = _required(args, "question")
    options = args.get("options", [])
    if not isinstance(options, list) or len(options) > MAX_OPTIONS or not all(isinstance(o, str) for o in options):
        raise ToolError(f"Interruption.ask: options must be a list of at most {MAX_OPTIONS} strings")
    timeout_ms = args.get("timeout_ms", bounds.default_timeout_ms)
    if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int) or not 1 <= timeout_ms <= bounds.max_timeout_ms:
        raise ToolError(f"Interruption.ask: timeout_ms must be an integer in 1..{bounds.max_timeout_ms}")
    key = interrupt_key(interrupt_id(ctx.run_id, ctx.tool_use_id))
    version = await ctx.waits.version(ctx.tenant_id, key)  # before looking at the interruption
    row = await store.open(
        ctx.tenant_id, ctx.run_id, ctx.tool_use_id, question=question, options=options,
        context=_text(args, "context"), priority=_priority(args), timeout_s=timeout_ms / 1000,
        max_pending=bounds.max_pending_per_run,
    )
    if row is None:
        raise ToolError(f"Interruption.ask: this run already has {bounds.max_pending_per_run} pending questions "
                        "(interruption.max_pending_per_run)")
    if row.status == "pending" and (row.expired or ctx.deadline_passed()):
        row = await store.time_out(ctx.tenant_id, ctx.run_id, row.id, force=True) or await _reread(store, ctx, row.id)
    if row.status == "pending":
        park = Park("interruption", {key: version}, deadline_s=timeout_ms / 1000, extra={"interrupt_id": row.id})
        if ctx.resume is None:
            park.events.append((EventType.INTERRUPTION_PENDING, row.pending_event()))
        return park
    return ToolResult.json(row.tool_result())


async def _cancel(ctx: ToolContext, store: InterruptStore, args: dict[str, Any]) -> ToolResult:
    iid = args.get("interrupt_id", args.get("interruption_id"))
    if not isinstance(iid, str) or not iid:
        raise ToolError("Interruption.cancel: interrupt_id is required")
    cancelled = await store.cancel(ctx.tenant_id, ctx.run_id, iid, by="agent_cancel")
    if cancelled:
        await ctx.services.waker.poke(ctx.tenant_id, [interrupt_key(iid)])
        return ToolResult.json({"interrupt_id": iid, "status": "cancelled"})
    row = await store.get(ctx.tenant_id, ctx.run_id, iid)
    if row is None:
        raise ToolError(f"Interruption.cancel: no interruption {iid!r} in this run")
    raise ToolError(f"Interruption.cancel: {iid} is already {row.status}")


async def _reread(store: InterruptStore, ctx: ToolContext, iid: str) -> Any:
    row = await store.get(ctx.tenant_id, ctx.run_id, iid)
    if row is None:  # pragma: no cover - the row was just read
        raise ToolError(f"Interruption: {iid} vanished")
    return row


def _required(args: dict[str, Any], key: str) -> str:
    v = _text(args, key)
    if v is None:
        raise ToolError(f"Interruption: {key} (non-empty text) is required")
    return v


def _text(args: dict[str, Any], key: str) -> str | None:
    v = args.get(key)
    if v is None:
        return None
    if not isinstance(v, str) or not v.strip():
        raise ToolError(f"Interruption: {key} (non-empty text) is required")
    if len(v) > MAX_TEXT:
        raise ToolError(f"Interruption: {key} is longer than {MAX_TEXT} characters")
    return v


def _priority(args: dict[str, Any]) -> str:
    p = args.get("priority", "normal")
    if p not in PRIORITIES:
        raise ToolError(f"Interruption: priority must be one of {', '.join(PRIORITIES)}")
    return str(p)
