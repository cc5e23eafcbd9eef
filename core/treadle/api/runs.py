"""/v1/runs: start, read, stream and cancel runs, in loomcycle's shapes (api/loomcycle.py has its
extra run fields, the /v1/agents routes and batch runs); treadle's own fields are additive."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from treadle.api.clienttools import client_tool_specs
from treadle.api.deps import Rt, Who
from treadle.api.errors import AUTHED, BODY, errors, fast_json, json_errors
from treadle.api.lazyroute import LazyAPIRoute
from treadle.api.loomcycle import (
    check_agent_id,
    new_agent_id,
    refuse_unsupported,
    run_batch,
    run_options,
)
from treadle.api.runstream import CLIENT_DISCONNECTED, RunStream, answers_with_stream
from treadle.api.sse import RUN_STREAM_ITEM, SSE_HEADERS, sse_content, sse_frame, stream_run_events
from treadle.api.steering import cancel_turn, decode_cursor, encode_cursor, waits_of
from treadle.domain.events import EventType
from treadle.domain.runs import RunStatus
from treadle.errors import BadRequest, NotFound, RunNotFound, ValidationFailed
from treadle.mcp.credentials import seal_credentials
from treadle.runtime import Runtime
from treadle.security.principal import Principal
from treadle.store.runs import NewRun, RunRecord
from treadle.store.sessions import SessionRecord
from treadle.wire import (
    BatchRequest,
    BatchResult,
    CancelRequest,
    ForkRequest,
    ForkResult,
    Run,
    RunCancelled,
    RunCreated,
    RunEvents,
    RunList,
    RunRequest,
    TurnCancelled,
)

router = APIRouter(prefix="/v1", tags=["runs"], route_class=LazyAPIRoute)
__all__ = ["CancelRequest", "RunRequest", "router", "run_view"]
class EventStream(StreamingResponse):
    """The documented answer of the stream route: server-sent events."""

    media_type = "text/event-stream"


#: the SSE stream a run route may answer with instead of JSON
SSE_DOC = sse_content(RUN_STREAM_ITEM, "with `Accept: text/event-stream`: the run's events as SSE frames")
#: POST /v1/runs' default answer (api/runstream.py)
RUN_SSE_DOC = sse_content(RUN_STREAM_ITEM, (
    "the default (no `Accept`, `*/*`, `text/event-stream`): the run's events as SSE frames until it ends; "
    "the client leaving first cancels the run (`client disconnected`) unless `detach` or `interactive`"))


def _wants_sse(request: Request) -> bool:
    """The session routes' negotiation: the stream only when `text/event-stream` is preferred."""
    return answers_with_stream(request.headers.get("accept"), stream_by_default=False)


def _sse_response(rt: Runtime, tenant: str, run: RunRecord, from_seq: int, *, fresh: bool = False,
                  cancel_on_leave: bool = False) -> StreamingResponse:
    """loomcycle's first frames (`session`, `agent`; no ids) and then the run's events; with
    `cancel_on_leave`, the client leaving before the end cancels the run (api/runstream.py)."""
    session_id = run.session
    agent: dict[str, Any] = {"agent_id": run.agent_id or run.id, "run_id": run.id, "session_id": session_id}
    preamble = []
    if fresh:
        preamble.append(sse_frame(EventType.SESSION, {"type": EventType.SESSION, "text": session_id,
                                                       "session_id": session_id}))
        agent.update(parent_agent_id=None, parent_context=run.parent_context)
    preamble.append(sse_frame(EventType.AGENT, agent))
    body = stream_run_events(
        rt.runs, rt.hub, tenant, run.id, from_seq, keepalive_s=rt.settings.sse_keepalive_seconds,
        budget_s=rt.sse_budget_s, linger_s=rt.sse_linger_s, preamble=preamble, stop=lambda: rt.draining,
    )

    async def leave() -> None:
        await rt.cancel_run(tenant, run.id, CLIENT_DISCONNECTED)

    return RunStream(body, headers=SSE_HEADERS, on_leave=leave if cancel_on_leave else None,
                     draining=lambda: rt.draining)


async def continued_session(rt: Runtime, who: Principal, body: RunRequest) -> SessionRecord | None:
    """The session a run continues (`session_id`): 404 `session_not_found` when it is not the
    caller's (another tenant's, or another user's), 400 `session_agent_mismatch` when the run names
    another agent than the session's."""
    if body.session_id is None:
        return None
    session = await rt.sessions.get(who.tenant_id, body.session_id)
    if session is None or (body.user_id is not None and session.user_id not in (None, body.user_id)):
        raise NotFound(f"session {body.session_id!r} not found", code="session_not_found")
    if session.agent != body.agent:
        raise BadRequest(f"agent: session {session.id!r} holds runs of agent {session.agent!r}, not {body.agent!r}",
                         code="session_agent_mismatch")
    return session


async def _start(rt: Runtime, who: Principal, body: RunRequest, idempotency_key: str | None) -> tuple[RunRecord, bool]:
    refuse_unsupported(body, rt, who)
    session = await continued_session(rt, who, body)
    await rt.refuse_if_paused()
    if body.agent_id is not None and idempotency_key is None:  # a retry gets its run back (store/runs.py)
        await check_agent_id(rt, who.tenant_id, body.agent_id)
    return await rt.start_run(
        NewRun(
            tenant_id=who.tenant_id,
            agent=body.agent,
            segments=body.to_segments(),
            user_id=body.user_id if session is None else (body.user_id or session.user_id),
            session_id=session.id if session is not None else None,
            metadata=body.metadata,
            interactive=body.interactive,
            idempotency_key=idempotency_key,
            client_tools=client_tool_specs(rt, body.client_tools, body.client_tool_timeout_seconds),
            client_tool_timeout_s=body.client_tool_timeout_seconds,
            allowed_hosts=body.allowed_hosts,
            agent_id=body.agent_id or new_agent_id(),
            parent_context=body.parent_context.stored() if body.parent_context else None,
            run_options=run_options(body),
            sealed_credentials=seal_credentials(who.tenant_id, body.user_credentials),
        )
    )


@router.post("/runs", status_code=202, response_model=RunCreated, response_model_exclude_unset=True,
             responses={200: RUN_SSE_DOC, 202: {"description": "with `Accept: application/json`"},
                        **errors(*BODY, 404, 409)})
async def create_run(
    body: RunRequest,
    request: Request,
    rt: Rt,
    who: Who,
    idempotency_key: Annotated[str | None, Header(max_length=256)] = None,
) -> JSONResponse | StreamingResponse:
    """Start a run. As loomcycle answers: `200`, the run's events as SSE until it ends (loomcycle's
    `session` and `agent` frames first); a client that leaves before then cancels the run (reason
    `client disconnected`) unless the body says `detach: true` or `interactive: true`; a server
    shutting down ends the stream without cancelling. With `Accept: application/json` (JSON
    preferred to `text/event-stream`): `202 {"run_id", "status", …}` and the run goes on alone.
    The cloud's API Gateway function, which cannot stream, answers JSON unless asked for
    `text/event-stream` (docs/loomcycle.md). An `Idempotency-Key` header makes retries safe: the
    same key returns the run it started the first time."""
    run, created = await _start(rt, who, body, idempotency_key)
    if answers_with_stream(request.headers.get("accept"), stream_by_default=rt.runs_stream_by_default):
        detached = body.detach or body.interactive or not created  # a retry's stream is not the run's owner
        return _sse_response(rt, who.tenant_id, run, 0, fresh=True, cancel_on_leave=not detached)
    return JSONResponse({"run_id": run.id, "status": run.status, "created": created,
                         "agent_id": run.agent_id or run.id, "session_id": run.session,
                         "parent_context": run.parent_context}, status_code=202)


@router.post("/runs:batch", response_model=BatchResult, response_model_exclude_unset=True, responses=errors(*BODY))
async def create_runs(body: BatchRequest, rt: Rt, who: Who) -> dict[str, Any]:
    """loomcycle's batch: ≤ 32 spawns (each a POST /v1/runs body), answered index-aligned as
    `{results: [{agent_id, run_id, session_id, status, stop_reason, final_text, usage, error,
    parent_context}], spawned}`; with `timeout_ms` the answer waits (at most that long) for the runs
    to finish. A refused spawn fails at its index without stopping the others."""

    async def start(raw: dict[str, Any]) -> RunRecord:
        run, _ = await _start(rt, who, RunRequest.model_validate(raw), None)
        return run

    return await run_batch(rt, who, body, start)


def _utc(t: datetime | None) -> datetime | None:
    return t.replace(tzinfo=UTC) if t is not None and t.tzinfo is None else t


@router.get("/runs", response_model=RunList, response_model_exclude_unset=True, responses=errors(*AUTHED))
async def list_runs(
    rt: Rt,
    who: Who,
    status: Annotated[RunStatus | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[str | None, Query(max_length=512)] = None,
    user_id: Annotated[str | None, Query(max_length=128)] = None,
    agent: Annotated[str | None, Query(max_length=128)] = None,
    parent_run_id: Annotated[str | None, Query(max_length=128)] = None,
    created_after: Annotated[datetime | None, Query()] = None,
    created_before: Annotated[datetime | None, Query()] = None,
) -> dict[str, Any]:
    """The tenant's runs, newest first, `limit` per page; pass `next_cursor` back as `cursor` for the
    next page; `user_id` / `agent` / `parent_run_id` (a run's sub-agent runs) narrow the list, and
    `created_after` (inclusive) / `created_before` (exclusive) to a window (RFC 3339; without a
    zone: UTC). Parked runs (`status=waiting`) carry `waits`: [{kind, key, deadline, tool_use_id}]."""
    runs = await rt.runs.list_runs(who.tenant_id, status.value if status else None, limit, decode_cursor(cursor),
                                   user_id=user_id, agent=agent, parent_run_id=parent_run_id,
                                   created_after=_utc(created_after), created_before=_utc(created_before))
    out = [run_view(r) for r in runs]
    waits = await waits_of(rt, who.tenant_id, [r.id for r in runs if r.status == RunStatus.WAITING.value])
    for item in out:
        if item["run_id"] in waits:
            item["waits"] = waits[item["run_id"]]
    next_cursor = encode_cursor(runs[-1].created_at, runs[-1].id) if len(runs) == limit else None
    return {"runs": out, "next_cursor": next_cursor}


@router.get("/runs/{run_id}", response_model=Run, response_model_exclude_unset=True,
            responses=errors(*AUTHED, 404))
async def get_run(run_id: str, rt: Rt, who: Who) -> dict[str, Any]:
    run = await rt.runs.get(who.tenant_id, run_id)
    if run is None:
        raise RunNotFound(f"run {run_id!r} not found")
    out = run_view(run)
    if run.status == RunStatus.WAITING.value:  # what it waits on, as in a list (issue 43 item 9)
        waits = await waits_of(rt, who.tenant_id, [run.id])
        if run.id in waits:
            out["waits"] = waits[run.id]
    return out


@router.get("/runs/{run_id}/events", name="get_events", response_model=RunEvents, response_model_exclude_unset=True,
            responses=errors(*AUTHED, 404))
async def events_route(
    run_id: str,
    rt: Rt,
    who: Who,
    from_seq: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=5000)] = 1000,
) -> Response:
    """A page of the run's stored events after `from_seq`, oldest first, at most `limit`."""
    # sent without validating each event against the model (errors.fast_json); tests/contract checks it
    return fast_json(await get_events(run_id, rt, who, from_seq, limit))


async def get_events(run_id: str, rt: Runtime, who: Principal, from_seq: int = 0, limit: int = 1000) -> dict[str, Any]:
    run = await rt.runs.get(who.tenant_id, run_id)
    if run is None:
        raise RunNotFound(f"run {run_id!r} not found")
    events = await rt.runs.events(who.tenant_id, run_id, from_seq, limit)
    return {"run_id": run_id, "status": run.status, "events": [e.to_api() for e in events]}


@router.get("/runs/{run_id}/stream", response_class=EventStream,
            responses={200: SSE_DOC, **json_errors(*AUTHED, 404)})
async def stream(
    run_id: str,
    rt: Rt,
    who: Who,
    from_seq: Annotated[int, Query(ge=0)] = 0,
    last_event_id: Annotated[str | None, Header()] = None,
) -> StreamingResponse:
    """SSE of the run's events after `from_seq` (or after the `Last-Event-ID` header)."""
    if last_event_id is not None:
        if not (last_event_id.strip().isascii() and last_event_id.strip().isdigit()):  # "²".isdigit() too
            raise ValidationFailed("Last-Event-ID must be an event seq (a non-negative integer)")
        from_seq = max(from_seq, int(last_event_id))
    run = await rt.runs.get(who.tenant_id, run_id)
    if run is None:
        raise RunNotFound(f"run {run_id!r} not found")
    return _sse_response(rt, who.tenant_id, run, from_seq)


@router.post("/runs/{run_id}/cancel", response_model=RunCancelled | TurnCancelled, response_model_exclude_unset=True,
             responses=errors(*BODY, 404, 409, 429))
async def cancel_run(run_id: str, rt: Rt, who: Who, body: CancelRequest | None = None) -> dict[str, Any]:
    """`{"scope": "run"}`: cancel the run at its next safe point (never between a tool_use and its
    tool_result), with its unfinished sub-agent runs; cancelling a finished run is a no-op that
    reports its status. `{"scope": "turn"}`: cancel only the current turn of an interactive run
    (api/steering.py). No scope: loomcycle's turn cancel (what its client's `cancelTurn` sends):
    409 `not_interactive` for a run that is not interactive, which goes on running (a turn
    cancel never ends a run; `{"scope": "run"}` or POST /v1/agents/{id}/cancel does)."""
    scope = (body.scope if body is not None else None) or "turn"
    if scope == "turn":
        return await cancel_turn(rt, who.tenant_id, run_id, body.reason if body else None)
    reason = (body.reason if body else None) or "cancelled by api"
    run = await rt.cancel_run(who.tenant_id, run_id, reason)
    if run is None:
        raise RunNotFound(f"run {run_id!r} not found")
    return {"run_id": run.id, "status": run.status, "cancel_requested": not run.terminal or run.status == "cancelled"}


def run_view(run: RunRecord) -> dict[str, Any]:
    """A run's state: loomcycle's `error` (the message) and `stop_reason` (none for a failed run),
    treadle's error object as `error_detail`."""
    out = run.to_api()
    if run.error is not None:
        out["error"] = run.error.get("error")
        out["error_detail"] = run.error
    if run.status == "failed":
        out["stop_reason"] = None
    return out


@router.post("/runs/{run_id}/fork", status_code=202, response_model=ForkResult, response_model_exclude_none=True,
             responses=errors(*BODY, 404, 409))
async def fork_run(run_id: str, body: ForkRequest, rt: Rt, who: Who,
                   idempotency_key: Annotated[str | None, Header(max_length=256)] = None) -> dict[str, Any]:
    """Fork the run at event `at_seq` (issue 36): a new run, in a session of its own, whose history
    is this run's up to there — tool exchanges kept whole — and whose first turn is `prompt` or the
    last user turn asked again; `agent` / `def_id` run another agent or AgentDef version on it.
    400 `invalid_at_seq` / `no_user_turn` / unknown agent; 404 `run_not_found`; 409 `not_forkable`
    (a sub-agent run). `mode: replay` answers the fork's tool calls from the original's recorded
    results while they match (same tool, same canonical input, in order) and runs them for real from
    the first divergence (engine/forkreplay.py). An `Idempotency-Key` header makes retries safe:
    the same key returns the fork it started the first time (and no second seed session)."""
    return await rt.fork_run(who.tenant_id, run_id, body.at_seq, prompt=body.prompt, agent=body.agent,
                             def_id=body.def_id, replay=body.mode == "replay", idempotency_key=idempotency_key)
