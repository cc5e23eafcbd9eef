"""loomcycle's `GET /v1/users/{user_id}/agents/stream` (its runs_stream.go): a user's run
transitions as SSE, for triggers that fire when a run ends.

Frames, as loomcycle's client (`streamUserRunStates`) parses them: first `event: stream_open`
`{user_id, filter_status, filter_agent, keepalive_interval}`, then one `event: run_state` per
transition `{run_id, agent_id, agent, user_id, parent_agent_id?, status, stop_reason?, error?,
ts, parent_context?}`; `?status=a,b` and `?agent=name` filter. Only transitions after the
stream opened are sent (as loomcycle's bus does).

treadle reads the rows (store/runstates.py) every `poll_s`: a status that lasts less than that
may be skipped (loomcycle's bus also drops frames for a slow reader). Statuses are treadle's,
so `queued` and `waiting` appear besides loomcycle's running / completed / failed / cancelled.
A stream ends after loomcycle's 30 minutes (or the cloud shape's response budget); reconnect."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator
from datetime import datetime, timedelta
from typing import Any

from treadle.api.sse import json_data, sse_frame, sse_item, when_event
from treadle.store.db import Pool
from treadle.store.runstates import RunState, db_now, user_run_states

MAX_LIFETIME_S = 30 * 60  # loomcycle's streamMaxLifetime
#: a row's updated_at is its transaction's start: a change that commits late can carry a time
#: before the last poll, so each poll looks this far back (the known statuses drop the repeats)
OVERLAP = timedelta(seconds=5)
_NULLABLE_STR = {"type": ["string", "null"]}
#: the spec of a frame (api/sse.py sse_content)
USER_STREAM_ITEM = sse_item(
    ["stream_open", "run_state"], json_data({"type": "object"}),
    when_event(["stream_open"], {"properties": {"data": json_data({
        "type": "object", "required": ["user_id", "keepalive_interval"],
        "properties": {"user_id": {"type": "string"}, "filter_status": {"type": ["array", "null"]},
                       "filter_agent": _NULLABLE_STR, "keepalive_interval": {"type": "number"}}})}}),
    when_event(["run_state"], {"properties": {"data": json_data({
        "type": "object", "required": ["run_id", "agent_id", "agent", "status", "ts"],
        "properties": {"run_id": {"type": "string"}, "agent_id": _NULLABLE_STR, "agent": {"type": "string"},
                       "user_id": _NULLABLE_STR, "parent_agent_id": {"type": "string"},
                       "status": {"type": "string"}, "stop_reason": {"type": "string"},
                       "error": {"type": "string"}, "ts": {"type": "string"}}})}}),
)


def parse_filter(status: str | None) -> list[str]:
    return sorted({s.strip() for s in (status or "").split(",") if s.strip()})


def state_frame(s: RunState) -> dict[str, Any]:
    """loomcycle's connector.RunStateEvent (omitempty fields left out when empty)."""
    out: dict[str, Any] = {"run_id": s.run_id, "agent_id": s.agent_id, "agent": s.agent, "user_id": s.user_id}
    if s.parent_agent_id:
        out["parent_agent_id"] = s.parent_agent_id
    out["status"] = s.status
    if s.stop_reason and s.status != "failed":
        out["stop_reason"] = s.stop_reason
    if s.status == "failed" and s.error:
        out["error"] = str(s.error.get("error") or s.error.get("code") or "")
    out["ts"] = s.updated_at.isoformat()
    if s.parent_context:
        out["parent_context"] = s.parent_context
    return out


async def transitions(
    pool: Pool, tenant_id: str, user_id: str, statuses: list[str], agent: str | None, *, poll_s: float = 0.25,
) -> AsyncGenerator[list[RunState], None]:
    """The user's run transitions after this call, one batch per poll (an empty batch when
    nothing moved), filtered by `statuses` and `agent`. Endless: the caller stops reading."""
    since = await db_now(pool) - OVERLAP
    known = {s.run_id: s.status for s in await user_run_states(pool, tenant_id, user_id, since)}
    while True:
        now_db = await db_now(pool)
        batch: list[RunState] = []
        for s in await user_run_states(pool, tenant_id, user_id, since):
            if known.get(s.run_id) == s.status:
                continue
            known[s.run_id] = s.status
            if (statuses and s.status not in statuses) or (agent and s.agent != agent):
                continue
            batch.append(s)
        since = _later(since, now_db - OVERLAP)
        yield batch
        await asyncio.sleep(poll_s)


async def user_agent_states(
    pool: Pool, tenant_id: str, user_id: str, statuses: list[str], agent: str | None, *,
    keepalive_s: float, budget_s: float | None, poll_s: float = 0.25,
) -> AsyncIterator[bytes]:
    yield sse_frame("stream_open", {"user_id": user_id, "filter_status": statuses or None,
                                    "filter_agent": agent or "", "keepalive_interval": int(keepalive_s)})
    started = last_sent = time.monotonic()
    lifetime = min(MAX_LIFETIME_S, budget_s) if budget_s is not None else MAX_LIFETIME_S
    async with contextlib.aclosing(transitions(pool, tenant_id, user_id, statuses, agent, poll_s=poll_s)) as changes:
        async for batch in changes:
            for s in batch:
                last_sent = time.monotonic()
                yield sse_frame("run_state", state_frame(s))
            now = time.monotonic()
            if now - started >= lifetime:
                return
            if now - last_sent >= keepalive_s:
                last_sent = now
                yield b": keepalive\n\n"


def _later(a: datetime, b: datetime) -> datetime:
    return a if a >= b else b
