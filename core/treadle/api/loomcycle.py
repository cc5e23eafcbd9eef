"""loomcycle's run fields, its agent routes and batch runs.

- The run fields treadle honours (POST /v1/runs, /v1/runs:batch): `tools` (narrows the agent's
  tools), `agent_id` (the caller's handle; `a_` + 16 hex when omitted; 409 `agent_id_in_use`
  while a run with it is live), `user_tier` (the run's model route comes from that `tiers:`
  entry), `parent_context` (stored, echoed on run state and the `agent` frame, inherited by
  sub-agents), `sampling` (passed to the provider), `run_timeout_seconds` (the run fails with
  `run_timeout` at its next step after the deadline), `tenant_id` (must be the caller's),
  `session_id` (continue that session: api/runs.py `continued_session`, api/sessions.py),
  `compaction` (over the agent's, field by field: engine/compaction.py).
- Those it does not have are refused with 400 `unsupported_field` naming the field.
- `GET /v1/agents/{agent_id}`, `POST /v1/agents/{agent_id}/cancel` (the whole run and its
  sub-agents), `GET /v1/users/{user_id}/agents` (and its `/stream` of run transitions),
  `POST /v1/runs:batch` (≤ 32, index-aligned).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import StreamingResponse
from pydantic import ValidationError

from treadle.api.agentstream import USER_STREAM_ITEM, parse_filter, user_agent_states
from treadle.api.auth import principal_view
from treadle.api.deps import Rt, Who
from treadle.api.errors import AUTHED, BODY, errors
from treadle.api.lazyroute import LazyAPIRoute
from treadle.api.sse import SSE_HEADERS, sse_content
from treadle.domain.events import EventType
from treadle.domain.runs import RunOptions
from treadle.errors import BadRequest, Conflict, NotFound, TreadleError
from treadle.runtime import Runtime
from treadle.security.principal import Principal
from treadle.store.runs import RunRecord
from treadle.wire import (
    AgentCancelled,
    AgentCancelRequest,
    AgentList,
    AgentState,
    BatchRequest,
    LoomcycleRunFields,
    ParentContext,
    Whoami,
)
from treadle.wire.runs import MAX_BATCH

router = APIRouter(prefix="/v1", tags=["runs"], route_class=LazyAPIRoute)

__all__ = ["MAX_BATCH", "BatchRequest", "LoomcycleRunFields", "ParentContext", "router"]
#: loomcycle fields treadle does not have: refused (never accepted and ignored)
UNSUPPORTED = {
    "user_bearer": "treadle does not substitute a per-run bearer into MCP headers; omit user_bearer",
    "web_search_filter": "treadle's WebSearch does not filter results by allowed_hosts; omit web_search_filter",
}
AGENT_ID_ALPHABET = "0123456789abcdef"


def new_agent_id() -> str:
    return "a_" + secrets.token_hex(8)


def refuse_unsupported(body: LoomcycleRunFields, rt: Runtime, who: Principal) -> None:
    for name, why in UNSUPPORTED.items():
        if getattr(body, name) is not None:
            raise BadRequest(f"{name}: {why}", code="unsupported_field")
    if body.tenant_id is not None and body.tenant_id != who.tenant_id:
        raise BadRequest(f"tenant_id: {body.tenant_id!r} is not the caller's tenant (the principal decides it)",
                         code="tenant_mismatch")
    if body.user_tier is not None and not rt.config.knows_user_tier(body.user_tier):
        known = ", ".join(rt.config.user_tiers or rt.config.tiers) or "none defined"
        section = "user_tiers" if rt.config.user_tiers else "tiers"
        raise BadRequest(f"user_tier: unknown user tier {body.user_tier!r} ({section}: {known})",
                         code="unknown_user_tier")


def run_options(body: LoomcycleRunFields) -> RunOptions | None:
    sampling = body.sampling.model_dump(exclude_none=True) if body.sampling is not None else None
    timeout = body.run_timeout_seconds
    compaction = body.compaction.model_dump(exclude_none=True) if body.compaction is not None else None
    opts = RunOptions(
        compaction=compaction or None,
        tools=tuple(body.tools) if body.tools is not None else None,
        sampling=sampling or None,
        user_tier=body.user_tier,
        run_timeout_seconds=timeout,
        deadline_unix=time.time() + timeout if timeout is not None else None,
    )
    return opts if opts.to_json() else None


async def check_agent_id(rt: Runtime, tenant_id: str, agent_id: str) -> None:
    run = await latest_by_agent_id(rt, tenant_id, agent_id)
    if run is not None and not run.terminal:
        raise Conflict(f"agent_id {agent_id!r} belongs to live run {run.id}", code="agent_id_in_use")


async def latest_by_agent_id(rt: Runtime, tenant_id: str, agent_id: str) -> RunRecord | None:
    """The newest run with this agent_id; a run started without one answers to its run id."""
    async with rt.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT id FROM runs WHERE tenant_id = %s AND (agent_id = %s OR (id = %s AND agent_id IS NULL))"
            " ORDER BY created_at DESC LIMIT 1",
            (tenant_id, agent_id, agent_id),
        )
        row = await cur.fetchone()
    return await rt.runs.get(tenant_id, row["id"]) if row else None


async def agent_state(rt: Runtime, run: RunRecord) -> dict[str, Any]:
    """loomcycle's GET /v1/agents/{id} shape, plus treadle's run fields (additive)."""
    parent_agent_id = None
    if run.parent_run_id:
        parent = await rt.runs.get(run.tenant_id, run.parent_run_id)
        parent_agent_id = (parent.agent_id or parent.id) if parent else None
    err = run.error or {}
    resident: dict[str, Any] = {}
    if run.parent_run_id and run.interactive:  # loomcycle's RFC BK P3: a live resident sub-agent
        row = await rt.residents.get(run.tenant_id, run.id)
        if row is not None and not row.closed and not row.ended:
            resident = {"resident": True, "resident_state": row.state}
    return {
        **resident,
        **run.to_api(),
        "agent_id": run.agent_id or run.id,
        "session_id": run.session,
        "parent_agent_id": parent_agent_id,
        "started_at": run.created_at.isoformat(),
        "live": not run.terminal,
        "error": err.get("error") if run.error else None,
        "error_detail": run.error,
        "stop_reason": loomcycle_stop_reason(run),
        "last_heartbeat_at": run.updated_at.isoformat(),
    }


def loomcycle_stop_reason(run: RunRecord) -> str | None:
    """loomcycle: a failed run has no stop_reason (the reason is in `error`); a cancelled one has
    the cancel reason."""
    if run.status == "failed":
        return None
    return run.stop_reason


@router.get("/agents/{agent_id}", response_model=AgentState, response_model_exclude_unset=True,
            responses=errors(*AUTHED, 404))
async def get_agent(agent_id: str, rt: Rt, who: Who) -> dict[str, Any]:
    run = await latest_by_agent_id(rt, who.tenant_id, agent_id)
    if run is None:
        raise NotFound(f"agent {agent_id!r} not found", code="agent_not_found")
    return await agent_state(rt, run)


@router.post("/agents/{agent_id}/cancel", response_model=AgentCancelled, response_model_exclude_unset=True,
             responses=errors(*BODY, 404))
async def cancel_agent(agent_id: str, rt: Rt, who: Who, body: AgentCancelRequest | None = None) -> dict[str, Any]:
    """Cancel the whole run (and its unfinished sub-agent runs); idempotent: a finished run
    answers with its status."""
    run = await latest_by_agent_id(rt, who.tenant_id, agent_id)
    if run is None:
        raise NotFound(f"agent {agent_id!r} not found", code="agent_not_found")
    reason = (body.reason if body else None) or "cancelled by api"
    was_live = not run.terminal
    after = await rt.cancel_run(who.tenant_id, run.id, reason)
    assert after is not None
    cascaded: list[str] = []
    if was_live:
        async with rt.pool.connection() as conn:
            cur = await conn.execute(  # the run's descendants that the cancel reached
                """WITH RECURSIVE sub AS (
                       SELECT id, agent_id, cancel_requested, created_at FROM runs
                       WHERE tenant_id = %(t)s AND parent_run_id = %(r)s
                       UNION ALL
                       SELECT c.id, c.agent_id, c.cancel_requested, c.created_at FROM runs c
                       JOIN sub ON c.parent_run_id = sub.id WHERE c.tenant_id = %(t)s)
                   SELECT coalesce(agent_id, id) AS a FROM sub WHERE cancel_requested ORDER BY created_at""",
                {"t": who.tenant_id, "r": run.id})
            cascaded = [r["a"] for r in await cur.fetchall()]
    out: dict[str, Any] = {"cancelled": was_live, "agent_id": agent_id, "run_id": run.id, "cascaded": cascaded,
                           "status": after.status,
                           # what loomcycle's TypeScript client reads (CancelAgentResult.cancelledCount)
                           "cancelled_count": (1 + len(cascaded)) if was_live else 0}
    if was_live:
        out["reason"] = reason
    return out


@router.get("/users/{user_id}/agents", response_model=AgentList, response_model_exclude_unset=True,
            responses=errors(*AUTHED))
async def user_agents(
    user_id: str, rt: Rt, who: Who,
    status: Annotated[str | None, Query(max_length=256)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> dict[str, Any]:
    """The user's runs as loomcycle's agent states, newest first; `status=a,b` filters."""
    wanted = {s for s in status.split(",") if s} if status else None
    runs = await rt.runs.list_runs(who.tenant_id, None, limit if wanted is None else 500, user_id=user_id)
    if wanted is not None:
        runs = [r for r in runs if r.status in wanted][:limit]
    return {"user_id": user_id, "agents": [await agent_state(rt, r) for r in runs]}


@router.get("/users/{user_id}/agents/stream", response_class=StreamingResponse,
            responses={200: sse_content(USER_STREAM_ITEM, "`stream_open`, then a `run_state` frame per transition"),
                       **errors(*AUTHED)})
async def user_agents_stream(
    user_id: str, rt: Rt, who: Who,
    status: Annotated[str | None, Query(max_length=256)] = None,
    agent: Annotated[str | None, Query(max_length=256)] = None,
) -> StreamingResponse:
    """loomcycle's run-state stream of one user (api/agentstream.py): `stream_open`, then one
    `run_state` frame per status change of the user's runs; `?status=a,b`, `?agent=name`."""
    body = user_agent_states(rt.pool, who.tenant_id, user_id, parse_filter(status), (agent or "").strip() or None,
                             keepalive_s=rt.settings.sse_keepalive_seconds, budget_s=rt.sse_budget_s)
    return StreamingResponse(body, media_type="text/event-stream", headers=SSE_HEADERS)


async def spawn_result(rt: Runtime, run: RunRecord) -> dict[str, Any]:
    final_text = None
    if run.status == "completed":
        events = await rt.runs.events(run.tenant_id, run.id, 0, 5000)
        texts = [str(e.payload.get("text", "")) for e in events if e.type == EventType.TEXT]
        final_text = texts[-1] if texts else ""
    return {"agent_id": run.agent_id or run.id, "run_id": run.id, "session_id": run.session,
            "status": run.status, "stop_reason": loomcycle_stop_reason(run), "final_text": final_text,
            "usage": run.usage(), "error": (run.error or {}).get("error") if run.error else None,
            "parent_context": run.parent_context}


async def run_batch(rt: Runtime, who: Principal, body: BatchRequest,
                    start: Callable[[dict[str, Any]], Awaitable[RunRecord]]) -> dict[str, Any]:
    """Start every spawn (`start` validates it as a POST /v1/runs body); a spawn that is refused
    gets `{status: "failed", error, code}` at its index and does not stop the others."""
    results: list[dict[str, Any]] = []
    started: list[tuple[int, str]] = []
    for i, raw in enumerate(body.spawns):
        try:
            run = await start(raw)
        except ValidationError as exc:
            msg = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
            results.append({"status": "failed", "error": msg, "code": "validation_error"})
            continue
        except TreadleError as exc:
            results.append({"status": "failed", "error": exc.message, "code": exc.code})
            continue
        results.append(await spawn_result(rt, run))
        started.append((i, run.id))
    deadline = time.monotonic() + body.timeout_ms / 1000
    for i, run_id in started:
        now = await rt.runs.get(who.tenant_id, run_id)
        while now is not None and not now.terminal and time.monotonic() < deadline:
            await _wait_a_little(rt, run_id)
            now = await rt.runs.get(who.tenant_id, run_id)
        if now is not None:
            results[i] = await spawn_result(rt, now)
    return {"results": results, "spawned": len(started)}


async def _wait_a_little(rt: Runtime, run_id: str) -> None:
    with rt.hub.subscribe(run_id) as live:
        await live.wait(0.25)


@router.get("/_me", response_model=Whoami, response_model_exclude_unset=True, responses=errors(*AUTHED))
async def whoami(who: Who) -> dict[str, Any]:
    """loomcycle's whoami: the caller's tenant, subject and scopes (api/auth.py principal_view)."""
    return principal_view(who)
