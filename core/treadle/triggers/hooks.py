"""on_complete hooks of schedules and webhooks, and the channel port they (and `delivery:
channel` webhooks) publish through.

Hooks run after the fired run ends, found by polling: the sidecar's sweeper and the cloud's
maintenance function call `HookRunner.run_once`, which claims fires/deliveries whose run is
terminal and whose hooks are pending (a claim a dead process left is taken again after 5 min, so
hooks are at-least-once). Only a `completed` run runs its hooks; any other ending records
`skipped`. A hook that fails is recorded with a stable code (e.g. `channels_unavailable`), never
raised.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from treadle.errors import ChannelPublishFailed, ChannelsUnavailable, NotFound, TreadleError
from treadle.ports import ChannelPublisher
from treadle.store.channels import ChannelStore
from treadle.store.db import Pool
from treadle.store.memory import MemoryStore
from treadle.store.schedules import ScheduleStore
from treadle.store.webhooks import WebhookStore

log = logging.getLogger("treadle.triggers")

MAX_FINAL_TEXT = 16 * 1024


class ScopedPublisher:
    """Publish to a channel for a triggered run, picking the stream from the channel's scope —
    global → "", agent → the agent, user → the user — over the runtime's publisher port."""

    def __init__(self, channels: ChannelStore, publisher: ChannelPublisher) -> None:
        self.channels = channels
        self.publisher = publisher

    async def publish(
        self, tenant_id: str, channel: str, value: Any, *, agent: str | None = None, user_id: str | None = None
    ) -> dict[str, Any]:
        try:
            d = await self.channels.get_def(tenant_id, channel)
        except NotFound as exc:
            raise ChannelPublishFailed(exc.message, code="channel_not_declared") from None
        if d.scope == "agent":
            if not agent:
                raise ChannelPublishFailed(f"channel {channel!r} is agent-scoped; no agent", code="channel_scope")
            scope_id = agent
        elif d.scope == "user":
            if not user_id:
                raise ChannelPublishFailed(f"channel {channel!r} is user-scoped; no user_id", code="channel_scope")
            scope_id = user_id
        else:
            scope_id = ""
        try:
            return await self.publisher.publish(tenant_id, channel, value, scope_id=scope_id)
        except TreadleError as exc:
            raise ChannelPublishFailed(exc.message, code=exc.code) from None


def require_publisher(publisher: ScopedPublisher | None) -> ScopedPublisher:
    if publisher is None:
        raise ChannelsUnavailable("channels are not available in this runtime (no channel publisher)")
    return publisher


#: (tenant, server, tool, args) → `{"is_error", "text"}`: an MCP tool call (treadle/mcp/tools.py)
McpCaller = Callable[[str, str, str, dict[str, Any]], Awaitable[dict[str, Any]]]


class HookRunner:
    def __init__(self, pool: Pool, memory: MemoryStore, publisher: ScopedPublisher | None,
                 mcp: McpCaller | None = None) -> None:
        self.memory = memory
        self.publisher = publisher
        self.mcp = mcp
        self.schedules = ScheduleStore(pool)
        self.webhooks = WebhookStore(pool)

    async def run_once(self, limit: int = 100) -> int:
        """Run the hooks of every fire/delivery whose run has ended; returns how many were handled."""
        handled = 0
        for row in await self.schedules.claim_hooks(limit):
            status, result = await self._run(row, "schedule_name")
            await self.schedules.finish_hooks(row["schedule_id"], row["scheduled_for"], status, result)
            handled += 1
        for row in await self.webhooks.claim_hooks(limit):
            status, result = await self._run(row, "webhook_name")
            await self.webhooks.finish_hooks(row["id"], status, result)
            handled += 1
        return handled

    async def _run(self, row: dict[str, Any], name_key: str) -> tuple[str, dict[str, Any]]:
        if row["run_status"] != "completed":
            return "skipped", {"reason": f"the run ended {row['run_status']}", "results": []}
        body = await self.schedules.body_of(row["def_id"]) or {}
        hooks = [h for h in body.get("on_complete") or [] if isinstance(h, dict)]
        tenant, run_id = row["tenant_id"], row["run_id"]
        text = await self.schedules.final_text(tenant, run_id)
        outcome: dict[str, Any] = {
            name_key: row["name"],
            "run_id": run_id,
            "agent": row["agent"],
            "status": row["run_status"],
            "final_text": text[:MAX_FINAL_TEXT],
        }
        results: list[dict[str, Any]] = []
        for i, hook in enumerate(hooks):
            kind = str(hook.get("kind"))
            try:
                detail = await self._one(tenant, row, hook, outcome)
                results.append({"index": i, "kind": kind, "ok": True, **detail})
            except TreadleError as exc:
                results.append({"index": i, "kind": kind, "ok": False, "code": exc.code, "error": exc.message})
            except Exception as exc:
                log.warning("on_complete hook %s of run %s failed: %s", kind, run_id, exc, exc_info=True)
                results.append({"index": i, "kind": kind, "ok": False, "code": "internal_error", "error": str(exc)})
        status = "done" if all(r["ok"] for r in results) else "failed"
        return status, {"results": results}

    async def _one(
        self, tenant: str, row: dict[str, Any], hook: dict[str, Any], outcome: dict[str, Any]
    ) -> dict[str, Any]:
        payload = hook.get("payload")
        if hook.get("kind") == "memory.set":
            scope = str(hook.get("scope"))
            scope_id = {"agent": row["agent"], "user": row["user_id"], "tenant": ""}.get(scope)
            if scope_id is None:
                raise TreadleError(f"memory.set scope {scope!r} needs a run with a user_id", code="memory_scope")
            value = payload if payload is not None else outcome
            ttl = hook.get("ttl_seconds")
            await self.memory.set(tenant, scope, scope_id, str(hook.get("key")), value, float(ttl) if ttl else None)
            return {"scope": scope, "key": hook.get("key")}
        if hook.get("kind") == "channel.publish":
            publisher = require_publisher(self.publisher)
            value = {**outcome, "payload": payload} if payload is not None else dict(outcome)
            out = await publisher.publish(
                tenant, str(hook.get("channel")), value, agent=row["agent"], user_id=row["user_id"]
            )
            return {"channel": hook.get("channel"), "message_id": out.get("message_id"), "woken": out.get("woken")}
        if hook.get("kind") == "mcp.call":
            if self.mcp is None:
                raise TreadleError("MCP is not available in this runtime", code="mcp_unavailable")
            server, tool = str(hook.get("server")), str(hook.get("tool"))
            args = hook.get("args")
            result = await self.mcp(tenant, server, tool, dict(args) if isinstance(args, dict) else {})
            if result.get("is_error"):
                raise TreadleError(f"{server}/{tool}: {str(result.get('text'))[:1000]}", code="mcp_tool_error")
            return {"server": server, "tool": tool, "text": str(result.get("text"))[:MAX_FINAL_TEXT]}
        raise TreadleError(f"unknown hook kind {hook.get('kind')!r}", code="unknown_hook")
