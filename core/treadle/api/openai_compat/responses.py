"""POST /v1/responses: OpenAI's Responses API, answered by the same paths as Chat Completions
(responses_wire.py translates the request): `model` names an agent (a durable run; its function
calls come back as `function_call` items with ids `tc.<run_id>.<tool_use_id>`, and a follow-up
request's `function_call_output` items continue that run), an alias, a tier or a pin (one model
call). `text.format` and `tool_choice` are honoured as on chat (structured.py).

Not built yet and refused by name: `store: true`, `background: true`, `previous_response_id`,
`conversation` (a response is not stored, so GET /v1/responses/{id} has nothing to return)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from treadle.api.deps import Rt, Who
from treadle.api.modelcall import Chosen, TextDelta, log_call, stream_once
from treadle.api.openai_compat.agentrun import Ended, follow, open_turn
from treadle.api.openai_compat.chat import call_checked, model_call, resolve_target
from treadle.api.openai_compat.errors import OPENAI_ERRORS, OpenAIRoute
from treadle.api.openai_compat.responses_wire import (
    ResponseDoc,
    function_call_item,
    message_item,
    new_id,
    to_chat,
    usage_json,
)
from treadle.api.openai_compat.wire import ChatRequest, finish_reason, tool_call_json
from treadle.api.sse import SSE_HEADERS
from treadle.domain.content import TextBlock, ToolUseBlock
from treadle.domain.runs import NewEvent
from treadle.errors import BadRequest, NotFound, TreadleError
from treadle.runtime import Runtime
from treadle.security.principal import Principal

router = APIRouter(prefix="/v1", tags=["openai"], route_class=OpenAIRoute)


async def _body(request: Request) -> Any:
    try:
        return json.loads(await request.body())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequest(f"the body is not valid JSON: {exc}", code="invalid_json") from None


@router.post("/responses", responses={
    200: {"content": {"text/event-stream": {"schema": {"type": "string"}}},
          "description": "a `response`; with `stream: true`, its events (`response.created` … `response.completed`)"},
    **OPENAI_ERRORS})
async def create_response(request: Request, rt: Rt, who: Who) -> Response:
    """OpenAI's Responses API (module docstring); errors in OpenAI's shape."""
    req, chat = to_chat(await _body(request))
    target = await resolve_target(rt, who.tenant_id, req.model)
    if target.kind == "agent":
        run_id, start_seq = await open_turn(rt, who.tenant_id, chat)
        doc = ResponseDoc(req, {"run_id": run_id})
        headers = {"x-treadle-run-id": run_id}
        body = _agent_events(rt, who, doc, run_id, start_seq)
    else:
        assert target.route is not None
        mc = model_call(chat)
        doc = ResponseDoc(req, {"request_id": mc.request_id})
        headers = {}
        if chat.stream and not chat.wish.active:
            body = _direct_events(rt, who, chat, doc, target.route, mc)
        else:
            body = _checked_events(rt, who, chat, doc, target.route, mc)
    if req.stream:
        return StreamingResponse(_framed(doc, body), media_type="text/event-stream",
                                 headers={**SSE_HEADERS, **headers})
    async for _ in _framed(doc, body):  # the same assembly as a stream, without sending it
        pass
    final = doc.final
    assert final is not None
    if final["status"] == "failed":
        err = final["error"]
        raise _Failed(err["message"], code=err["code"])
    return JSONResponse(final, headers=headers)


class _Failed(TreadleError):
    code = "provider_error"
    status = 502


def _not_stored(response_id: str) -> NotFound:
    return NotFound(f"No response with id '{response_id}' found: treadle does not store responses yet "
                    "(create them with store: false)", code="response_not_found")


@router.get("/responses/{response_id}", responses=OPENAI_ERRORS)
async def get_response(response_id: str, who: Who) -> Response:
    """Responses are not stored yet: every id is unknown (docs/openai.md)."""
    raise _not_stored(response_id)


@router.delete("/responses/{response_id}", responses=OPENAI_ERRORS)
async def delete_response(response_id: str, who: Who) -> Response:
    """Nothing is stored to delete yet."""
    raise _not_stored(response_id)


@router.post("/responses/{response_id}/cancel", responses=OPENAI_ERRORS)
async def cancel_response(response_id: str, who: Who) -> Response:
    """Only background responses can be cancelled, and treadle has none yet."""
    raise _not_stored(response_id)


@router.get("/responses/{response_id}/input_items", responses=OPENAI_ERRORS)
async def list_input_items(response_id: str, who: Who) -> Response:
    """A response's input is not stored yet."""
    raise _not_stored(response_id)


# The answer as a sequence of (kind, payload): "text" deltas, "calls" (chat tool_calls), then
# "final" (the whole response document). _framed turns it into OpenAI's streaming events.
Step = tuple[str, Any]


async def _direct_events(rt: Runtime, who: Principal, chat: ChatRequest, doc: ResponseDoc, route: Any,
                         mc: Any) -> AsyncIterator[Step]:
    import time

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
                text = "".join(b.text for b in item.content if isinstance(b, TextBlock))
                calls = [tool_call_json(b.id, b.name, b.input) for b in item.content if isinstance(b, ToolUseBlock)]
                yield "calls", (text, calls)
                yield "final", _finish(doc, finish_reason(item.stop_reason),
                                       usage_json(item.usage.input_tokens, item.usage.output_tokens))
    except TreadleError as exc:
        yield "final", doc.doc("failed", error={"code": exc.code, "message": exc.message})


async def _checked_events(rt: Runtime, who: Principal, chat: ChatRequest, doc: ResponseDoc, route: Any,
                          mc: Any) -> AsyncIterator[Step]:
    try:
        resp = await call_checked(rt, who, chat, route, mc, "responses")
    except TreadleError as exc:
        yield "final", doc.doc("failed", error={"code": exc.code, "message": exc.message})
        return
    doc.extension.update(provider=resp.provider, model=resp.model)
    text = "".join(b.text for b in resp.content if isinstance(b, TextBlock))
    calls = [tool_call_json(b.id, b.name, b.input) for b in resp.content if isinstance(b, ToolUseBlock)]
    if text:
        yield "text", text
    yield "calls", (text, calls)
    yield "final", _finish(doc, finish_reason(resp.stop_reason),
                           usage_json(resp.usage.input_tokens, resp.usage.output_tokens))


async def _agent_events(rt: Runtime, who: Principal, doc: ResponseDoc, run_id: str,
                        start_seq: int) -> AsyncIterator[Step]:
    parts: list[str] = []
    try:
        async for item in follow(rt, who.tenant_id, run_id, start_seq):
            if isinstance(item, Ended):
                yield "calls", ("".join(parts), item.tool_calls)
                yield "final", _finish(doc, item.finish_reason, usage_json(*item.usage))
                return
            parts.append(item.text)
            yield "text", item.text
    except TreadleError as exc:
        yield "final", doc.doc("failed", error={"code": exc.code, "message": exc.message})


def _finish(doc: ResponseDoc, finish: str, usage: dict[str, Any]) -> dict[str, Any]:
    if finish == "length":
        return doc.doc("incomplete", usage, incomplete="max_output_tokens")
    return doc.doc("completed", usage)


async def _framed(doc: ResponseDoc, steps: AsyncIterator[Step]) -> AsyncIterator[bytes]:
    """OpenAI's event sequence: created, in_progress, then per output item added → (content part,
    deltas, done) → done, then completed / incomplete / failed."""
    yield doc.event("response.created", response=doc.doc("in_progress"))
    yield doc.event("response.in_progress", response=doc.doc("in_progress"))
    msg_id: str | None = None
    text = ""
    async for kind, payload in steps:
        if kind == "text":
            if msg_id is None:
                msg_id = new_id("msg")
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
                item = function_call_item(call)
                idx = len(doc.output)
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
