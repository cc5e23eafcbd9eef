"""POST /v1/chat/completions. `model` names, looked up in this order:

1. a **treadle agent** (treadle.yaml, or the tenant's promoted AgentDef): the agent loop runs as a
   durable run (agentrun.py);
2. a **`models:` alias**, or 3. a **tier** (its candidates in order, with fallback): one model call
   through the gateway (api/modelcall.py, no run row);
4. **`<provider>/<model>`** with a configured provider id (`mock/echo`, `openai/gpt-4o-mini`): that pin;
5. a vendor model name that one alias or tier candidate serves (`gpt-4o-mini`): that candidate.
Anything else is `404 model_not_found`. GET /v1/models lists 1-3.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from treadle.api.deps import Rt, Who
from treadle.api.modelcall import (
    Chosen,
    ModelCall,
    TextDelta,
    alias_route,
    call_logged,
    gateway_route,
    log_call,
    pinned_route,
    stream_once,
    tier_route,
)
from treadle.api.openai_compat.agentrun import Ended, follow, open_turn
from treadle.api.openai_compat.errors import OPENAI_ERRORS, OpenAIRoute, error_doc
from treadle.api.openai_compat.wire import (
    DONE_FRAME,
    ChatRequest,
    Completion,
    data_frame,
    finish_reason,
    parse_request,
    to_conversation,
    tool_call_json,
    usage_json,
)
from treadle.api.openapi import body_doc
from treadle.api.sse import SSE_HEADERS, json_data, sse_content, sse_item
from treadle.domain.content import Block, Message, TextBlock, ToolUseBlock
from treadle.domain.runs import NewEvent
from treadle.engine.model_routes import ModelRoute
from treadle.errors import BadRequest, NotFound, ProviderError, TreadleError
from treadle.providers.base import ModelResponse
from treadle.runtime import Runtime
from treadle.security.principal import Principal
from treadle.wire import ChatCompletion

#: OpenAI's parameters treadle has no use for are accepted at their default values only
OPEN_PARAMS = "OpenAI's other parameters (n, top_p, …) are accepted at their default values and refused otherwise."
router = APIRouter(prefix="/v1", tags=["openai"], route_class=OpenAIRoute)

#: the spec of a streamed frame (api/sse.py sse_content): a chunk, OpenAI's error object, or [DONE]
CHUNK_ITEM = sse_item(None, {"anyOf": [{"const": "[DONE]"}, json_data({"type": "object", "anyOf": [
    {"required": ["id", "object", "created", "model", "choices"],
     "properties": {"object": {"const": "chat.completion.chunk"}, "choices": {"type": "array"}}},
    {"required": ["error"], "properties": {"error": {"type": "object", "required": ["message", "type"]}}},
]})]})


@dataclass(frozen=True, slots=True)
class Target:
    kind: str  # agent | alias | tier | pin
    route: ModelRoute | None = None


async def is_agent(rt: Runtime, tenant: str, name: str) -> bool:
    return rt.catalogue.get(name) is not None or bool(await rt.substrate.pinning.promoted(tenant, {name}))


async def resolve_target(rt: Runtime, tenant: str, model: str) -> Target:
    if await is_agent(rt, tenant, model):
        return Target("agent")
    if model in rt.config.models:
        return Target("alias", alias_route(rt, model))
    if model in rt.config.tiers:
        return Target("tier", tier_route(rt, model))
    provider, slash, name = model.partition("/")
    if slash and name and provider in rt.providers:
        return Target("pin", pinned_route(rt, provider, name))
    try:
        return Target("pin", gateway_route(rt, provider=None, model=model, tier=None))
    except NotFound:
        raise NotFound(f"The model `{model}` does not exist: it is no agent, models: alias or tier of this server, "
                       "nor <provider>/<model> (GET /v1/models lists them)", code="model_not_found") from None


async def _body(request: Request) -> Any:
    try:
        return json.loads(await request.body())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequest(f"the body is not valid JSON: {exc}", code="invalid_json") from None


@router.post("/chat/completions", response_model=ChatCompletion, response_model_exclude_unset=True, responses={
    200: sse_content(CHUNK_ITEM, "a `chat.completion`; with `stream: true`, `chat.completion.chunk` SSE frames"
                     " (OpenAI's: no `event:` line, the last frame's data `[DONE]`)"),
    **OPENAI_ERRORS}, openapi_extra=body_doc(ChatRequest, open_fields=OPEN_PARAMS))
async def chat_completions(request: Request, rt: Rt, who: Who) -> Response:
    """OpenAI's Chat Completions (module docstring: what `model` names); errors in OpenAI's shape."""
    req = parse_request(await _body(request))
    target = await resolve_target(rt, who.tenant_id, req.model)
    if target.kind == "agent":
        return await _agent(rt, who, req)
    assert target.route is not None
    return await _direct(rt, who, req, target.route)


def _sse(body: AsyncIterator[bytes], headers: dict[str, str] | None = None) -> StreamingResponse:
    return StreamingResponse(body, media_type="text/event-stream", headers={**SSE_HEADERS, **(headers or {})})


def _error_frame(exc: TreadleError) -> bytes:
    return data_frame(error_doc(exc.status, exc.message, exc.code))


def model_call(req: ChatRequest) -> ModelCall:
    """The one model call a direct request makes (with a `response_format`'s instruction and the
    `tool_choice`/`response_format` options for drivers that take them natively)."""
    system, messages = to_conversation(req)
    wish = req.wish
    if wish.instruction():
        system = f"{system}\n\n{wish.instruction()}" if system else wish.instruction()
    options: dict[str, Any] = {} if req.temperature is None else {"temperature": req.temperature}
    return ModelCall(system, messages, tools=[t.spec() for t in req.tools or ()], max_tokens=req.token_cap or 4096,
                     options={**options, **wish.options()})


async def _direct(rt: Runtime, who: Principal, req: ChatRequest, route: ModelRoute) -> Response:
    wish = req.wish
    mc = model_call(req)
    comp = Completion(req.model, {"request_id": mc.request_id})
    if req.stream and not wish.active:
        return _sse(_direct_stream(rt, who, req, route, mc, comp, time.monotonic(), list[NewEvent]()))
    resp = await call_checked(rt, who, req, route, mc)
    comp.extension.update(provider=resp.provider, model=resp.model)
    text = "".join(b.text for b in resp.content if isinstance(b, TextBlock))
    calls = [tool_call_json(b.id, b.name, b.input) for b in resp.content if isinstance(b, ToolUseBlock)]
    usage = usage_json(resp.usage.input_tokens, resp.usage.output_tokens)
    if req.stream:  # a checked answer streams once it is whole
        return _sse(_whole_stream(req, comp, text, calls, finish_reason(resp.stop_reason), usage))
    return JSONResponse(comp.message(text, calls, finish_reason(resp.stop_reason), usage))


async def call_checked(rt: Runtime, who: Principal, req: ChatRequest, route: ModelRoute,
                       mc: ModelCall, kind: str = "chat_completions") -> ModelResponse:
    """One call; with a `response_format` or `tool_choice` the answer is checked (structured.py),
    and an answer that misses is retried once with the problem named."""
    resp = await call_logged(rt, route, mc, kind, who=who.tenant_id, user_id=req.user)
    wish = req.wish
    if not wish.active:
        return resp
    content, problem = wish.check(resp.content)
    if problem is None:
        resp.content = content
        return resp
    said: list[Block] = [b for b in resp.content if isinstance(b, TextBlock) and b.text] or [TextBlock("(no answer)")]
    retry = ModelCall(mc.system, [*mc.messages, Message("assistant", said), Message("user", [TextBlock(problem)])],
                      tools=mc.tools, max_tokens=mc.max_tokens, options=mc.options, request_id=mc.request_id)
    resp = await call_logged(rt, route, retry, kind, who=who.tenant_id, user_id=req.user)
    content, problem = wish.check(resp.content)
    if problem is not None:
        raise ProviderError(f"the model's answer missed the request's response_format/tool_choice twice: {problem}",
                            code="structured_output_unmet")
    resp.content = content
    return resp


async def _whole_stream(req: ChatRequest, comp: Completion, text: str, calls: list[dict[str, Any]], finish: str,
                        usage: dict[str, int]) -> AsyncIterator[bytes]:
    yield data_frame(comp.chunk({"role": "assistant", "content": ""}))
    if text:
        yield data_frame(comp.chunk({"content": text}))
    for i, call in enumerate(calls):
        yield data_frame(comp.chunk({"tool_calls": [{"index": i, **call}]}))
    yield data_frame(comp.chunk({}, finish))
    if req.include_usage:
        yield data_frame(comp.usage_chunk(usage))
    yield DONE_FRAME


async def _direct_stream(rt: Runtime, who: Principal, req: ChatRequest, route: ModelRoute, mc: ModelCall,
                         comp: Completion, started: float, events: list[NewEvent]) -> AsyncIterator[bytes]:
    yield data_frame(comp.chunk({"role": "assistant", "content": ""}))
    try:
        async for item in stream_once(rt, route, mc, events):
            if isinstance(item, Chosen):
                comp.extension.update(provider=item.provider, model=item.model)
            elif isinstance(item, TextDelta):
                yield data_frame(comp.chunk({"content": item.text}))
            else:
                uses = [b for b in item.content if isinstance(b, ToolUseBlock)]
                for i, b in enumerate(uses):
                    call = {"index": i, **tool_call_json(b.id, b.name, b.input)}
                    yield data_frame(comp.chunk({"tool_calls": [call]}))
                yield data_frame(comp.chunk({}, finish_reason(item.stop_reason)))
                if req.include_usage:
                    yield data_frame(comp.usage_chunk(usage_json(item.usage.input_tokens, item.usage.output_tokens)))
                log_call("chat_completions", mc, route, who=who.tenant_id, user_id=req.user, started=started,
                         response=item, error=None, events=events)
    except ProviderError as exc:
        log_call("chat_completions", mc, route, who=who.tenant_id, user_id=req.user, started=started, response=None,
                 error=exc, events=events)
        yield _error_frame(exc)
        return
    yield DONE_FRAME


async def _agent(rt: Runtime, who: Principal, req: ChatRequest) -> Response:
    run_id, start_seq = await open_turn(rt, who.tenant_id, req)
    comp = Completion(req.model, {"run_id": run_id})
    headers = {"x-treadle-run-id": run_id}
    if req.stream:
        return _sse(_agent_stream(rt, who, req, comp, run_id, start_seq), headers)
    parts: list[str] = []
    async for item in follow(rt, who.tenant_id, run_id, start_seq):
        if isinstance(item, Ended):
            usage = usage_json(*item.usage)
            return JSONResponse(comp.message("".join(parts), item.tool_calls, item.finish_reason, usage),
                                headers=headers)
        parts.append(item.text)
    raise ProviderError(f"run {run_id}: the answer ended early", code="run_answer_incomplete")


async def _agent_stream(rt: Runtime, who: Principal, req: ChatRequest, comp: Completion, run_id: str,
                        start_seq: int) -> AsyncIterator[bytes]:
    yield data_frame(comp.chunk({"role": "assistant", "content": ""}))
    try:
        async for item in follow(rt, who.tenant_id, run_id, start_seq):
            if isinstance(item, Ended):
                for i, call in enumerate(item.tool_calls):
                    yield data_frame(comp.chunk({"tool_calls": [{"index": i, **call}]}))
                yield data_frame(comp.chunk({}, item.finish_reason))
                if req.include_usage:
                    yield data_frame(comp.usage_chunk(usage_json(*item.usage)))
                break
            yield data_frame(comp.chunk({"content": item.text}))
    except TreadleError as exc:
        yield _error_frame(exc)
        return
    yield DONE_FRAME
