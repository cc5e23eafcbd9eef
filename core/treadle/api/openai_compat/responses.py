"""OpenAI's Responses API: POST /v1/responses, answered by the same paths as Chat Completions
(responses_wire.py translates the request): `model` names an agent (a durable run; its function
calls come back as `function_call` items with ids `tc.<run_id>.<tool_use_id>`, and a follow-up
request's `function_call_output` items continue that run), an alias, a tier or a pin (one model
call). `text.format` and `tool_choice` are honoured as on chat (structured.py).

Stored responses (`store`, OpenAI's default true; migration 0070): GET /v1/responses/{id},
DELETE, GET …/input_items, and `previous_response_id` — the chain's input and output items go
before the new input; for an agent whose previous response was its run, the new turn continues
that run's session (its history is read in place), or its `function_call_output` items answer the
run's calls. An agent's response is a turn of its run: its document and its numbered events are
derived from the run's transcript (item ids from the response id and place), so any process, after
any restart, tells it the same way.

`background: true` (agents: a durable run; a one-call model is refused by name) answers at once
with `queued`; GET /v1/responses/{id}?stream=true&starting_after=N replays the events after N, then
follows; POST …/cancel cancels the run.

`conversation` (an id, or `{id}`) is an agent's treadle session (`s_…`, the `treadle.session_id`
of any of its responses): the turn is a run that continues the session, whose history it reads in
place, as POST /v1/runs {session_id} does; a one-call model, an unknown session
(`conversation_not_found`), or `previous_response_id` beside it are refused by name."""

from __future__ import annotations

import json
import math
import time
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from treadle.api.deps import Rt, Who
from treadle.api.modelcall import Chosen, TextDelta, log_call, stream_once
from treadle.api.openai_compat.agentrun import Ended, RunStillRunning, follow, open_turn, parse_call_id
from treadle.api.openai_compat.chat import call_checked, model_call, resolve_target
from treadle.api.openai_compat.errors import OPENAI_ERRORS, OpenAIRoute
from treadle.api.openai_compat.responses_wire import (
    ResponseDoc,
    ResponsesRequest,
    function_call_item,
    input_items,
    message_item,
    parse_responses,
    to_chat,
    usage_json,
)
from treadle.api.openai_compat.wire import ChatRequest, UnsupportedParameter, finish_reason, tool_call_json
from treadle.api.sse import SSE_HEADERS, json_data, sse_content
from treadle.domain.content import TextBlock, ToolUseBlock
from treadle.domain.runs import NewEvent
from treadle.errors import BadRequest, NotFound, TreadleError
from treadle.providers.base import ModelResponse
from treadle.runtime import Runtime
from treadle.security.principal import Principal
from treadle.store.openai_responses import ResponseStore, StoredResponse

router = APIRouter(prefix="/v1", tags=["openai"], route_class=OpenAIRoute)
#: how many previous responses a `previous_response_id` chain may hold
MAX_CHAIN = 100
TERMINAL = ("completed", "incomplete", "failed", "cancelled")
#: the spec of a streamed frame (api/sse.py sse_content): `event` is its data's `type`
EVENT_ITEM: dict[str, Any] = {"type": "object", "required": ["event", "data"], "properties": {
    "event": {"type": "string", "pattern": "^(response\\.[a-z_.]+|error)$"},
    "data": json_data({"type": "object", "required": ["type", "sequence_number"],
                       "properties": {"type": {"type": "string"}, "sequence_number": {"type": "integer"}}}),
    "id": {"type": "string"}}}


async def _body(request: Request) -> Any:
    try:
        return json.loads(await request.body())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequest(f"the body is not valid JSON: {exc}", code="invalid_json") from None


def _sse(frames: AsyncIterator[bytes], headers: dict[str, str] | None = None) -> StreamingResponse:
    return StreamingResponse(frames, media_type="text/event-stream", headers={**SSE_HEADERS, **(headers or {})})


@router.post("/responses", responses={
    200: sse_content(EVENT_ITEM, "a `response`; with `stream: true`, its events (`response.created` …"
                     " `response.completed`)"),
    **OPENAI_ERRORS})
async def create_response(request: Request, rt: Rt, who: Who) -> Response:
    """OpenAI's Responses API (module docstring); errors in OpenAI's shape."""
    req = parse_responses(await _body(request))
    if req.background and not req.stored:
        raise UnsupportedParameter("background=true keeps the response to be polled: it needs store=true", "store",
                                   code="invalid_value")
    if req.conversation_id is not None and req.previous_response_id is not None:
        raise UnsupportedParameter("conversation and previous_response_id exclude each other (a conversation holds "
                                   "its own history)", "conversation", code="invalid_value")
    store = ResponseStore(rt.pool)
    prev = None if req.previous_response_id is None else \
        await _stored(store, who, req.previous_response_id, "previous_response_id")
    target = await resolve_target(rt, who.tenant_id, req.model)
    if target.kind == "agent":
        return await _create_agent(rt, who, store, req, prev)
    if req.conversation_id is not None:
        raise UnsupportedParameter(f"conversation applies to an agent (a treadle session); {req.model!r} answers in "
                                   "one model call: chain its responses with previous_response_id", "conversation")
    if req.background:
        raise UnsupportedParameter(f"background applies to an agent (a durable run); {req.model!r} answers in one "
                                   "model call", "background")
    assert target.route is not None
    chat = to_chat(req, await _history(rt, who, store, prev))
    mc = model_call(chat)
    doc = ResponseDoc(req, {"request_id": mc.request_id})
    if req.stored:
        await store.create(_row(who, doc, req))
    if chat.stream and not chat.wish.active:
        steps = _direct_events(rt, who, chat, doc, target.route, mc)
    else:
        steps = _checked_events(rt, who, chat, doc, target.route, mc)
    return await _answer(rt, who, doc, steps, {})


async def _create_agent(rt: Runtime, who: Principal, store: ResponseStore, req: ResponsesRequest,
                        prev: StoredResponse | None) -> Response:
    session = req.conversation_id
    if session is not None:
        chat = to_chat(req)  # the session holds the history
        await _in_conversation(rt, who, chat, session)
    elif prev is not None and prev.run_id is not None and prev.request.get("model") == req.model:
        chat = to_chat(req)  # the run holds the history: its session, or the calls its results answer
        run = await rt.runs.get(who.tenant_id, prev.run_id)
        if run is not None and not (chat.messages and chat.messages[-1].role == "tool"):
            session = run.session
    else:
        chat = to_chat(req, await _history(rt, who, store, prev))
    try:
        run_id, start_seq = await open_turn(rt, who.tenant_id, chat, session)
    except NotFound as exc:
        if exc.code != "session_not_found" or req.conversation_id is None:
            raise
        raise UnsupportedParameter(f"Conversation with id '{session}' not found.", "conversation",
                                   code="conversation_not_found") from None
    doc = ResponseDoc(req, await _agent_extension(rt, who, run_id))
    headers = {"x-treadle-run-id": run_id}
    if req.stored:
        await store.create(_row(who, doc, req, run_id, start_seq))
    if req.background:
        if req.stream:
            return _sse(_replay(rt, who, doc, run_id, start_seq, None), headers)
        return JSONResponse(doc.doc("queued"), headers=headers)
    return await _answer(rt, who, doc, _agent_events(rt, who, doc, run_id, start_seq), headers)


async def _in_conversation(rt: Runtime, who: Principal, chat: ChatRequest, session: str) -> None:
    """Tool results given with `conversation` must answer a run of that session."""
    last = chat.messages[-1] if chat.messages else None
    parsed = parse_call_id(last.tool_call_id or "") if last is not None and last.role == "tool" else None
    if parsed is None:
        return
    run = await rt.runs.get(who.tenant_id, parsed[0])
    if run is not None and run.session != session:
        raise UnsupportedParameter(f"the function_call_output items answer run {run.id}, which is not in conversation "
                                   f"{session!r}", "conversation", code="invalid_value")


async def _agent_extension(rt: Runtime, who: Principal, run_id: str) -> dict[str, Any]:
    """`treadle` of an agent's response: its run, and the session (the `conversation` to continue)."""
    run = await rt.runs.get(who.tenant_id, run_id)
    return {"run_id": run_id, **({"session_id": run.session} if run is not None else {})}


def _row(who: Principal, doc: ResponseDoc, req: ResponsesRequest, run_id: str | None = None,
         start_seq: int | None = None) -> StoredResponse:
    return StoredResponse(id=doc.id, tenant_id=who.tenant_id, user_id=req.user or req.safety_identifier,
                          created_unix=doc.created_at, background=bool(req.background),
                          request=req.model_dump(mode="json", exclude_none=True), input_items=input_items(req, doc.id),
                          previous_response_id=req.previous_response_id, run_id=run_id, start_seq=start_seq, doc=None)


async def _answer(rt: Runtime, who: Principal, doc: ResponseDoc, steps: AsyncIterator[Step],
                  headers: dict[str, str]) -> Response:
    """The response as a stream or as one document; a stored one keeps its final document."""
    frames = _kept(rt, who, doc, _framed(doc, steps))
    if doc.req.stream:
        return _sse(frames, headers)
    async for _ in frames:  # the same assembly as a stream, without sending it
        pass
    final = doc.final
    assert final is not None
    if final["status"] == "failed":
        err = final["error"]
        raise _Failed(err["message"], code=err["code"])
    return JSONResponse(final, headers=headers)


async def _kept(rt: Runtime, who: Principal, doc: ResponseDoc,
                frames: AsyncIterator[tuple[int, bytes]]) -> AsyncIterator[bytes]:
    async for _seq, frame in frames:
        if doc.final is not None and doc.req.stored:
            await ResponseStore(rt.pool).finish(who.tenant_id, doc.id, doc.final)
        yield frame


class _Failed(TreadleError):
    code = "provider_error"
    status = 502


class ResponseNotFound(NotFound):
    code = "response_not_found"


class NotBackground(BadRequest):
    code = "response_not_background"


async def _stored(store: ResponseStore, who: Principal, response_id: str, param: str | None = None) -> StoredResponse:
    row = await store.get(who.tenant_id, response_id)
    if row is None:
        what = "Previous response" if param else "Response"
        exc = ResponseNotFound(f"{what} with id '{response_id}' not found.")
        if param is None:
            raise exc
        raise UnsupportedParameter(exc.message, param, code="previous_response_not_found") from None
    return row


def _doc_of(row: StoredResponse, extension: dict[str, Any]) -> ResponseDoc:
    req = ResponsesRequest.model_validate(row.request)
    return ResponseDoc(req, extension, response_id=row.id, created_at=row.created_unix)


async def _current(rt: Runtime, who: Principal, row: StoredResponse) -> dict[str, Any]:
    """The response document as it stands: the kept one, else (an agent's turn under way, or one
    whose teller left) derived from the run's transcript so far."""
    if row.doc is not None:
        return row.doc
    if row.run_id is None or row.start_seq is None:  # a model call whose process or client went away
        doc = _doc_of(row, {})
        return doc.doc("failed", error={"code": "response_interrupted", "message":
                                        "the response was cut off before it finished (its client left or its server "
                                        "restarted)"})
    doc = _doc_of(row, await _agent_extension(rt, who, row.run_id))
    async for _ in _framed(doc, _agent_events(rt, who, doc, row.run_id, row.start_seq, live=False, wait=False)):
        pass
    if doc.final is not None:
        await ResponseStore(rt.pool).finish(who.tenant_id, row.id, doc.final)
        return doc.final
    return doc.doc("in_progress" if doc.output or doc.seq > 2 else "queued")


async def _history(rt: Runtime, who: Principal, store: ResponseStore,
                   prev: StoredResponse | None) -> list[dict[str, Any]]:
    """The items of the previous responses, oldest first: each one's input, then its output."""
    items: list[dict[str, Any]] = []
    row, seen = prev, 0
    while row is not None:
        seen += 1
        if seen > MAX_CHAIN:
            raise UnsupportedParameter(f"the previous_response_id chain is longer than {MAX_CHAIN} responses",
                                       "previous_response_id", code="invalid_value")
        doc = await _current(rt, who, row)
        items = [*row.input_items, *doc["output"], *items]
        earlier = row.previous_response_id
        row = None if earlier is None else await store.get(who.tenant_id, earlier)
        if earlier is not None and row is None:  # never a history silently cut short
            raise UnsupportedParameter(f"response {earlier!r}, earlier in the previous_response_id chain, is gone "
                                       "(deleted, erased or past its retention)", "previous_response_id",
                                       code="previous_response_not_found")
    return items


@router.get("/responses/{response_id}", responses={
    200: sse_content(EVENT_ITEM, "the `response`; with `stream=true` (a background response), its events after "
                     "`starting_after`, then the rest as they come"),
    **OPENAI_ERRORS})
async def get_response(response_id: str, rt: Rt, who: Who, stream: bool = False,
                       starting_after: Annotated[int | None, Query(ge=-1)] = None,
                       include_obfuscation: bool | None = None,
                       include: Annotated[list[str] | None, Query(alias="include[]")] = None) -> Response:
    """A stored response (derived from its run's transcript while an agent's turn is under way);
    `stream=true` replays a background response's events after `starting_after`, then follows."""
    if include:
        raise UnsupportedParameter("include is not supported", "include", code="unsupported_parameter")
    if include_obfuscation:
        raise UnsupportedParameter("include_obfuscation=true is not supported (treadle's events carry no "
                                   "obfuscation padding)", "include_obfuscation")
    row = await _stored(ResponseStore(rt.pool), who, response_id)
    if not stream:
        if starting_after is not None:
            raise UnsupportedParameter("starting_after applies with stream=true", "starting_after",
                                       code="invalid_value")
        return JSONResponse(await _current(rt, who, row))
    if not row.background or row.run_id is None or row.start_seq is None:
        raise UnsupportedParameter("only a response created with background=true can be streamed again", "stream",
                                   code="invalid_value")
    doc = _doc_of(row, await _agent_extension(rt, who, row.run_id))
    return _sse(_replay(rt, who, doc, row.run_id, row.start_seq, starting_after), {"x-treadle-run-id": row.run_id})


async def _replay(rt: Runtime, who: Principal, doc: ResponseDoc, run_id: str, start_seq: int,
                  starting_after: int | None) -> AsyncIterator[bytes]:
    """A background response's events, derived from the run's transcript alone (the same numbers
    every time), those after `starting_after` sent; the stream ends at the response's end, or at
    the shape's SSE budget — in the cloud's API function, whose responses are buffered, the
    linger after the first frame sent (the client resumes from its last sequence_number)."""
    first_sent: list[float] = []
    linger = rt.sse_linger_s

    def stop_at() -> float:
        return first_sent[0] + linger if first_sent and linger is not None else math.inf

    steps = _agent_events(rt, who, doc, run_id, start_seq, live=False, resumable=True, stop_at=stop_at)
    async for seq, frame in _framed(doc, steps, queued=True):
        if starting_after is None or seq > starting_after:
            if not first_sent:
                first_sent.append(time.monotonic())
            yield frame
        if doc.final is not None:
            await ResponseStore(rt.pool).finish(who.tenant_id, doc.id, doc.final)


@router.delete("/responses/{response_id}", responses=OPENAI_ERRORS)
async def delete_response(response_id: str, rt: Rt, who: Who) -> Response:
    """Delete a stored response (an agent's run stays, as every run does)."""
    if not await ResponseStore(rt.pool).delete(who.tenant_id, response_id):
        raise ResponseNotFound(f"Response with id '{response_id}' not found.")
    return JSONResponse({"id": response_id, "object": "response", "deleted": True})


@router.post("/responses/{response_id}/cancel", responses=OPENAI_ERRORS)
async def cancel_response(response_id: str, rt: Rt, who: Who) -> Response:
    """Cancel a background response: its run is cancelled and the response answers `cancelled`;
    a finished one is returned as it is (idempotent)."""
    store = ResponseStore(rt.pool)
    row = await _stored(store, who, response_id)
    if not row.background or row.run_id is None:
        raise NotBackground("Cannot cancel a synchronous response.")
    current = await _current(rt, who, row)
    if current["status"] in TERMINAL:
        return JSONResponse(current)
    await rt.cancel_run(who.tenant_id, row.run_id, f"response {response_id} cancelled")
    doc = {**current, "status": "cancelled"}
    await store.finish(who.tenant_id, response_id, doc)
    return JSONResponse((await _stored(store, who, response_id)).doc)


@router.get("/responses/{response_id}/input_items", responses=OPENAI_ERRORS)
async def list_input_items(response_id: str, rt: Rt, who: Who, after: str | None = None,
                           limit: Annotated[int, Query(ge=1, le=100)] = 20,
                           order: Literal["asc", "desc"] = "desc",
                           include: Annotated[list[str] | None, Query(alias="include[]")] = None) -> Response:
    """The items of the response's input, OpenAI's list page (`after` an item id)."""
    if include:
        raise UnsupportedParameter("include is not supported", "include", code="unsupported_parameter")
    row = await _stored(ResponseStore(rt.pool), who, response_id)
    items = row.input_items if order == "asc" else list(reversed(row.input_items))
    if after is not None:
        ids = [i["id"] for i in items]
        if after not in ids:
            raise UnsupportedParameter(f"no input item {after!r} in response {response_id}", "after",
                                       code="invalid_value")
        items = items[ids.index(after) + 1:]
    page = items[:limit]
    return JSONResponse({"object": "list", "data": page, "first_id": page[0]["id"] if page else None,
                         "last_id": page[-1]["id"] if page else None, "has_more": len(items) > limit})


# The answer as a sequence of (kind, payload): "text" deltas, "calls" (chat tool_calls), then
# "final" (the whole response document). _framed turns it into OpenAI's streaming events.
Step = tuple[str, Any]


def _answer_steps(doc: ResponseDoc, resp: ModelResponse, *, streamed: bool) -> list[Step]:
    """A whole model answer's steps: its text (unless already streamed), its calls, the final."""
    text = "".join(b.text for b in resp.content if isinstance(b, TextBlock))
    calls = [tool_call_json(b.id, b.name, b.input) for b in resp.content if isinstance(b, ToolUseBlock)]
    usage = usage_json(resp.usage.input_tokens, resp.usage.output_tokens, resp.usage.cache_read_input_tokens,
                       resp.usage.cache_creation_input_tokens)
    return [*([("text", text)] if text and not streamed else []), ("calls", (text, calls)),
            ("final", _finish(doc, finish_reason(resp.stop_reason), usage))]


def _failed(doc: ResponseDoc, exc: TreadleError) -> Step:
    return "final", doc.doc("failed", error={"code": exc.code, "message": exc.message})


async def _direct_events(rt: Runtime, who: Principal, chat: ChatRequest, doc: ResponseDoc, route: Any,
                         mc: Any) -> AsyncIterator[Step]:
    started, events = time.monotonic(), list[NewEvent]()
    try:
        async for item in stream_once(rt, route, mc, events):
            if isinstance(item, Chosen):
                doc.extension.update(provider=item.provider, model=item.model)
            elif isinstance(item, TextDelta):
                yield "text", item.text
            else:
                log_call("responses", mc, route, who=who.tenant_id, user_id=chat.user, started=started,
                         response=item, error=None, events=events)
                for step in _answer_steps(doc, item, streamed=True):
                    yield step
    except TreadleError as exc:
        yield _failed(doc, exc)


async def _checked_events(rt: Runtime, who: Principal, chat: ChatRequest, doc: ResponseDoc, route: Any,
                          mc: Any) -> AsyncIterator[Step]:
    try:
        resp = await call_checked(rt, who, chat, route, mc, "responses")
    except TreadleError as exc:
        yield _failed(doc, exc)
        return
    doc.extension.update(provider=resp.provider, model=resp.model)
    for step in _answer_steps(doc, resp, streamed=False):
        yield step


async def _agent_events(rt: Runtime, who: Principal, doc: ResponseDoc, run_id: str, start_seq: int, *,
                        live: bool = True, wait: bool = True, resumable: bool = False,
                        stop_at: Callable[[], float] | None = None) -> AsyncIterator[Step]:
    parts: list[str] = []
    try:
        async for item in follow(rt, who.tenant_id, run_id, start_seq, live=live, wait=wait, stop_at=stop_at):
            if isinstance(item, Ended):
                yield "calls", ("".join(parts), item.tool_calls)
                yield "final", _finish(doc, item.finish_reason, usage_json(*item.usage))
                return
            parts.append(item.text)
            yield "text", item.text
    except RunStillRunning:
        if not resumable:
            raise
    except TreadleError as exc:
        if exc.code == "run_cancelled":
            yield "final", doc.doc("cancelled")
        else:
            yield _failed(doc, exc)


def _finish(doc: ResponseDoc, finish: str, usage: dict[str, Any]) -> dict[str, Any]:
    if finish == "length":
        return doc.doc("incomplete", usage, incomplete="max_output_tokens")
    return doc.doc("completed", usage)


async def _framed(doc: ResponseDoc, steps: AsyncIterator[Step], *,
                  queued: bool = False) -> AsyncIterator[tuple[int, bytes]]:
    """OpenAI's event sequence: created (queued for a background response), in_progress, then per
    output item added → (content part, deltas, done) → done, then completed / incomplete / failed
    (a cancelled response: `response.failed` with status cancelled). Yields (sequence_number, frame)."""
    yield doc.event("response.created", response=doc.doc("queued" if queued else "in_progress"))
    yield doc.event("response.in_progress", response=doc.doc("in_progress"))
    msg_id: str | None = None
    text = ""
    async for kind, payload in steps:
        if kind == "text":
            if msg_id is None:
                msg_id = doc.item_id("msg", len(doc.output))
                yield doc.event("response.output_item.added", output_index=len(doc.output),
                                item=message_item(msg_id, "", "in_progress"))
                yield doc.event("response.content_part.added", item_id=msg_id, output_index=len(doc.output),
                                content_index=0, part={"type": "output_text", "text": "", "annotations": []})
            text += payload
            yield doc.event("response.output_text.delta", item_id=msg_id, output_index=len(doc.output),
                            content_index=0, delta=payload, logprobs=[])
        elif kind == "calls":
            whole, calls = payload
            if msg_id is not None:
                item = message_item(msg_id, whole or text)
                part = item["content"][0]
                idx = len(doc.output)
                yield doc.event("response.output_text.done", item_id=msg_id, output_index=idx, content_index=0,
                                text=part["text"], logprobs=[])
                yield doc.event("response.content_part.done", item_id=msg_id, output_index=idx, content_index=0,
                                part=part)
                doc.output.append(item)
                yield doc.event("response.output_item.done", output_index=idx, item=item)
            for call in calls:
                idx = len(doc.output)
                item = function_call_item(doc.item_id("fc", idx), call)
                yield doc.event("response.output_item.added", output_index=idx,
                                item={**item, "status": "in_progress", "arguments": ""})
                yield doc.event("response.function_call_arguments.delta", item_id=item["id"], output_index=idx,
                                delta=item["arguments"])
                yield doc.event("response.function_call_arguments.done", item_id=item["id"], output_index=idx,
                                name=item["name"], arguments=item["arguments"])
                doc.output.append(item)
                yield doc.event("response.output_item.done", output_index=idx, item=item)
        else:
            final = payload
            final["output"] = list(doc.output)
            doc.final = final
            status = final["status"]
            name = {"completed": "response.completed", "incomplete": "response.incomplete"}.get(
                status, "response.failed")
            yield doc.event(name, response=final)
