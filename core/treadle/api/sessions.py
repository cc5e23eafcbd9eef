"""Sessions (issue 34): a conversation of many runs of one agent and user.

- `POST /v1/sessions/{id}/messages` — loomcycle's continuation: the next user turn of the session
  as a new run (agent and user come from the session); it answers like `POST /v1/runs` (SSE with
  `Accept: text/event-stream`, else 202). 404 `session_not_found`, 409 `session_busy` while
  another run of the session is live. The run's history is the session's earlier runs, read in
  place (engine/replay.py `history_messages`): nothing is copied.
- `POST /v1/sessions/{id}/replay` — loomcycle's replay: a new session of a (possibly other) agent
  seeded with this one's conversation, optionally compacted (`Runtime.replay_session`).
- `GET /v1/sessions/{id}/transcript` — loomcycle's transcript across all the session's runs.
- `GET /v1/sessions`, `GET /v1/users/{user_id}/sessions` — the sessions, newest activity first.
- `GET /v1/sessions/{id}`, `PATCH /v1/sessions/{id}` — one session; its title, description,
  tags, pinned and archived flags.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

from treadle.api.deps import Rt, Who
from treadle.api.errors import AUTHED, BODY, errors, fast_json
from treadle.api.lazyroute import LazyAPIRoute
from treadle.api.runs import SSE_DOC, _sse_response, _start, _wants_sse
from treadle.api.steering import decode_cursor, encode_cursor
from treadle.domain.events import EventType
from treadle.errors import BadRequest, NotFound
from treadle.runtime import Runtime
from treadle.security.principal import Principal
from treadle.store.sessions import SessionRecord
from treadle.wire import (
    HistoryAnswer,
    HistoryRequest,
    ReplayRequest,
    ReplayResult,
    RunCreated,
    SessionList,
    SessionMessageRequest,
    SessionPatch,
    SessionView,
    Transcript,
)

router = APIRouter(prefix="/v1", tags=["sessions"], route_class=LazyAPIRoute)


def _not_found(session_id: str) -> NotFound:
    return NotFound(f"session {session_id!r} not found", code="session_not_found")


async def _session(rt: Runtime, who: Principal, session_id: str) -> SessionRecord:
    session = await rt.sessions.get(who.tenant_id, session_id)
    if session is None:
        raise _not_found(session_id)
    return session


@router.post("/sessions/{session_id}/messages", status_code=202, response_model=RunCreated,
             response_model_exclude_unset=True, responses={202: SSE_DOC, **errors(*BODY, 404, 409)})
async def post_message(
    session_id: str,
    body: SessionMessageRequest,
    request: Request,
    rt: Rt,
    who: Who,
    idempotency_key: Annotated[str | None, Header(max_length=256)] = None,
) -> JSONResponse | StreamingResponse:
    """Continue the session with a new run (loomcycle's `continueSession`): the session's earlier
    runs are its history; the stream shows only the new run's events."""
    session = await _session(rt, who, session_id)
    run, created = await _start(rt, who, body.run_request(session.agent, session.user_id, session.id),
                                idempotency_key)
    if _wants_sse(request):
        return _sse_response(rt, who.tenant_id, run, 0, fresh=True)
    return JSONResponse({"run_id": run.id, "status": run.status, "created": created,
                         "agent_id": run.agent_id or run.id, "session_id": run.session,
                         "parent_context": run.parent_context}, status_code=202)


@router.post("/sessions/{session_id}/replay", response_model=ReplayResult, responses=errors(*BODY, 404, 409, 502))
async def replay(session_id: str, body: ReplayRequest, rt: Rt, who: Who) -> dict[str, Any]:
    """loomcycle's `replaySession`: a NEW session bound to `agent`, seeded with this session's
    conversation (reasoning left out, so another provider may continue it) →
    `{new_session_id, seed_run_id, events_copied, compacted}`; continue it with
    `POST /v1/sessions/{new_session_id}/messages`. `compress`: the carried history is summarized
    with the target agent's compaction settings first. No model turn runs. 404
    `session_not_found`, 409 `agent_gone`, 400 `empty_source`, 502 when the summary fails."""
    return await rt.replay_session(who.tenant_id, session_id, body.agent.strip(), body.compress)


@router.get("/sessions/{session_id}/transcript", response_model=Transcript, response_model_exclude_unset=True,
            responses=errors(*AUTHED, 404))
async def transcript(session_id: str, rt: Rt, who: Who) -> Response:
    """loomcycle's transcript of a session: `{session{id, user_id, agent, created_at}, events:
    [{seq, run_id, ts_ns, type, event, payload?}]}` across all its runs in order (`seq` is the
    event's seq in its run); `payload` holds a `user_input`'s segments."""
    session = await rt.sessions.get(who.tenant_id, session_id)
    if session is None:  # a sub-agent run's session: its run alone
        return await _run_transcript(rt, who, session_id)
    events: list[dict[str, Any]] = []
    after = (-1, 0)
    while True:
        page = await rt.sessions.events(who.tenant_id, session_id, after=after, limit=1000)
        for place, e in page:
            events.append(_transcript_event(e.run_id, e.seq, e.type, e.payload, e.created_at))
            after = (place, e.seq)
        if len(page) < 1000:
            break
    return fast_json({"session": _session_info(session), "events": events})


def _session_info(session: SessionRecord) -> dict[str, Any]:
    return {"id": session.id, "user_id": session.user_id or "", "agent": session.agent,
            "created_at": session.created_at.isoformat(), "title": session.title or "",
            "run_count": session.run_count}


def _transcript_event(run_id: str, seq: int, etype: str, payload: dict[str, Any], created_at: Any) -> dict[str, Any]:
    ts_ns = int(created_at.timestamp() * 1_000_000_000) if created_at else 0
    event = {"seq": seq, "type": etype, **payload}
    if created_at is not None:
        event["ts"] = created_at.isoformat()
    item: dict[str, Any] = {"seq": seq, "run_id": run_id, "ts_ns": ts_ns, "type": etype, "event": event}
    if etype == EventType.USER_INPUT:
        item["payload"] = payload.get("segments")
    return item


async def _run_transcript(rt: Runtime, who: Principal, session_id: str) -> Response:
    if not session_id.startswith("s_"):
        raise _not_found(session_id)
    run = await rt.runs.get(who.tenant_id, "r_" + session_id.removeprefix("s_"))
    if run is None:
        raise _not_found(session_id)
    events: list[dict[str, Any]] = []
    from_seq = 0
    while True:
        page = await rt.runs.events(who.tenant_id, run.id, from_seq, 1000)
        events.extend(_transcript_event(run.id, e.seq, e.type, e.payload, e.created_at) for e in page)
        if len(page) < 1000:
            break
        from_seq = page[-1].seq
    return fast_json({"session": {"id": session_id, "user_id": run.user_id or "", "agent": run.agent,
                                  "created_at": run.created_at.isoformat()}, "events": events})


async def _view(rt: Runtime, who: Principal, session: SessionRecord, *, detail: bool = False) -> dict[str, Any]:
    out = session.to_api()
    if detail:
        out["runs"] = await rt.sessions.run_ids(who.tenant_id, session.id)
        out["live_run_id"] = await rt.sessions.live_run(who.tenant_id, session.id)
    return out


async def _list(rt: Runtime, who: Principal, user_id: str | None, agent: str | None, archived: bool, limit: int,
                cursor: str | None) -> dict[str, Any]:
    sessions = await rt.sessions.list_sessions(who.tenant_id, user_id=user_id, agent=agent, include_archived=archived,
                                      limit=limit, before=decode_cursor(cursor))
    next_cursor = encode_cursor(sessions[-1].updated_at, sessions[-1].id) if len(sessions) == limit else None
    return {"sessions": [s.to_api() for s in sessions], "next_cursor": next_cursor}


Limit = Annotated[int, Query(ge=1, le=500)]
Cursor = Annotated[str | None, Query(max_length=512)]


@router.get("/sessions", response_model=SessionList, response_model_exclude_unset=True, responses=errors(*AUTHED))
async def list_sessions(
    rt: Rt, who: Who,
    user_id: Annotated[str | None, Query(max_length=128)] = None,
    agent: Annotated[str | None, Query(max_length=128)] = None,
    archived: bool = False,
    limit: Limit = 50,
    cursor: Cursor = None,
) -> dict[str, Any]:
    """The tenant's sessions, newest activity first; `user_id` / `agent` narrow the list, `archived`
    includes archived ones; pass `next_cursor` back as `cursor` for the next page."""
    return await _list(rt, who, user_id, agent, archived, limit, cursor)


@router.get("/users/{user_id}/sessions", response_model=SessionList, response_model_exclude_unset=True,
            responses=errors(*AUTHED))
async def user_sessions(
    user_id: str, rt: Rt, who: Who,
    agent: Annotated[str | None, Query(max_length=128)] = None,
    archived: bool = False,
    limit: Limit = 50,
    cursor: Cursor = None,
) -> dict[str, Any]:
    """One user's sessions, newest activity first."""
    return await _list(rt, who, user_id, agent, archived, limit, cursor)


@router.get("/sessions/{session_id}", response_model=SessionView, response_model_exclude_unset=True,
            responses=errors(*AUTHED, 404))
async def get_session(session_id: str, rt: Rt, who: Who) -> dict[str, Any]:
    """The session, its runs in order and its live run, if any."""
    return await _view(rt, who, await _session(rt, who, session_id), detail=True)


@router.patch("/sessions/{session_id}", response_model=SessionView, response_model_exclude_unset=True,
              responses=errors(*BODY, 404))
async def patch_session(session_id: str, body: SessionPatch, rt: Rt, who: Who) -> dict[str, Any]:
    """Set the session's title, description, tags, pinned or archived flag (the fields given)."""
    changes = body.model_dump(exclude_unset=True, exclude_none=True)
    session = await rt.sessions.update(who.tenant_id, session_id, changes)
    if session is None:
        raise _not_found(session_id)
    return await _view(rt, who, session, detail=True)


@router.post("/_history", response_model=HistoryAnswer, response_model_exclude_unset=True,
             responses=errors(*BODY, 404, 409, 502))
async def history(body: HistoryRequest, rt: Rt, who: Who) -> Response:
    """loomcycle's History over HTTP: the History tool's ops (builtins/history.py) with the body as
    its input; scope `tenant` (default) or `user` (the caller's subject's chats). A chat outside the
    scope is 404. `recap` writes the chat's summary with its agent's model → `{scope, summary, chat}`
    (409 `agent_gone`, 400 `empty_source`, 502 when the summary fails)."""
    return fast_json(await caller_history(rt, who, body))


async def caller_history(rt: Runtime, who: Principal, body: HistoryRequest) -> dict[str, Any]:
    """A History op for an API caller (POST /v1/_history, MCP `history`): the caller's tenant, its
    subject for scope `user`."""
    from treadle.builtins.history import ChatNotFound, History

    args = body.model_dump(exclude_none=True, by_alias=True)
    if body.scope == "self":
        raise BadRequest("scope: self names an agent's own chats; over HTTP use tenant or user", code="bad_request")
    try:
        return await History(rt.pool, who.tenant_id, None, who.subject, ("tenant", "user"), rt,
                             rt.substrate.memory.embedder).dispatch(body.op, args)
    except ChatNotFound as exc:
        raise NotFound(exc.message, code="session_not_found") from None
