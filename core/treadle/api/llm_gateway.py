"""POST /v1/_llm/chat — loomcycle's LLM gateway: one model call through treadle's model routing
(a pinned provider + model, a `models:` alias, a tier with its fallback order), the provider's
retries, streaming or not, without the agent loop and without a run row (api/modelcall.py).

Request (loomcycle's `llmChatRequest`): `messages` [{role: system|user|assistant|tool, content:
str, tool_calls: [{id, name, input}], tool_call_id}], `tools` [{name, description,
input_schema}], `max_tokens`, `temperature`, `stream`, `provider`, `model`, `tier`, `user_id`,
`user_tier`. Response: `{id, request_id, provider, model, content: [{type: text|tool_use, …}],
stop_reason, usage}`; with `stream: true` the SSE frames `provider_chosen`, `content_block_start`,
`content_block_delta`, `content_block_stop`, `message_delta`, `done` — or `error`
`{type, code, message}`. Errors before a response starts: `{code, error}` like every treadle route.

Refused, not ignored: `user_tier` (treadle has no `user_tiers:`), `stop_sequences`, `user_bearer`
(as loomcycle refuses them), any other unknown field.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import AsyncIterator
from typing import Any, Literal

from fastapi import APIRouter
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, field_validator

from treadle.api.deps import Rt, Who
from treadle.api.errors import BODY, errors
from treadle.api.lazyroute import LazyAPIRoute
from treadle.api.modelcall import Chosen, ModelCall, TextDelta, call_logged, gateway_route, log_call, stream_once
from treadle.api.sse import SSE_HEADERS, json_data, sse_content, sse_item, when_event
from treadle.domain.content import Block, Message, TextBlock, ToolResultBlock, ToolUseBlock
from treadle.domain.ids import is_identifier
from treadle.domain.runs import NewEvent
from treadle.engine.model_routes import ModelRoute
from treadle.errors import BadRequest, ProviderError
from treadle.providers.base import ModelResponse, ToolSpec
from treadle.runtime import Runtime
from treadle.security.principal import Principal
from treadle.wire import GatewayResponse

router = APIRouter(prefix="/v1", tags=["llm gateway"], route_class=LazyAPIRoute)


class GatewayToolCall(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1, max_length=256)
    name: str = Field(min_length=1, max_length=128)
    input: dict[str, Any] = Field(default_factory=dict)


class GatewayMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = None
    tool_calls: list[GatewayToolCall] | None = None
    tool_call_id: str | None = Field(default=None, max_length=256)


class GatewayTool(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str = Field(default="", max_length=8192)
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})


class GatewayRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    messages: list[GatewayMessage] = Field(min_length=1, max_length=4096)
    tools: list[GatewayTool] | None = Field(default=None, max_length=128)
    max_tokens: int | None = Field(default=None, ge=0, le=1_000_000)  # 0 / absent: 4096, as loomcycle
    temperature: float | None = Field(default=None, ge=0, le=2)
    stream: bool = False
    provider: str | None = None
    model: str | None = None
    tier: str | None = None
    user_id: str | None = None
    user_tier: str | None = None

    @field_validator("user_id")
    @classmethod
    def _ident(cls, v: str | None) -> str | None:
        if v is not None and v != "" and not is_identifier(v):
            raise ValueError("must match [A-Za-z0-9_-]{1,128}")
        return v or None

    @field_validator("user_tier")
    @classmethod
    def _no_user_tiers(cls, v: str | None) -> str | None:
        if v:
            raise ValueError("treadle has no user_tiers; route with tier, or provider + model")
        return None


def to_model_call(body: GatewayRequest) -> ModelCall:
    """loomcycle's translation: system messages join the system text; a tool message becomes a
    tool_result block of a user turn; consecutive turns of one role merge (vendors want them
    alternating)."""
    system: list[str] = []
    messages: list[Message] = []
    for i, m in enumerate(body.messages):
        blocks: list[Block]
        if m.role == "system":
            system.append(m.content or "")
            continue
        if m.role == "user":
            role, blocks = "user", [TextBlock(m.content or "")]
        elif m.role == "assistant":
            blocks = [TextBlock(m.content)] if m.content else []
            blocks += [ToolUseBlock(tc.id, tc.name, tc.input) for tc in m.tool_calls or ()]
            role = "assistant"
        else:
            if not m.tool_call_id:
                raise BadRequest(f"messages[{i}].tool_call_id: a tool message requires tool_call_id")
            role, blocks = "user", [ToolResultBlock(m.tool_call_id, m.content or "")]
        if m.tool_calls and m.role != "assistant":
            raise BadRequest(f"messages[{i}].tool_calls: only an assistant message carries tool_calls")
        if messages and messages[-1].role == role:
            messages[-1].content.extend(blocks)
        else:
            messages.append(Message(role, blocks))  # type: ignore[arg-type]
    if not messages:
        raise BadRequest("messages: at least one user message is required")
    options: dict[str, Any] = {} if body.temperature is None else {"temperature": body.temperature}
    return ModelCall(
        system="\n\n".join(system), messages=messages,
        tools=[ToolSpec(t.name, t.description, {"type": "object", **t.input_schema}) for t in body.tools or ()],
        max_tokens=body.max_tokens or 4096, options=options,
    )


def usage_json(resp: ModelResponse) -> dict[str, int]:
    return resp.usage.to_json()


def content_json(resp: ModelResponse) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for b in resp.content:
        if isinstance(b, TextBlock) and b.text:
            out.append({"type": "text", "text": b.text})
        elif isinstance(b, ToolUseBlock):
            out.append({"type": "tool_use", "id": b.id, "name": b.name, "input": b.input})
    return out


#: the spec of a streamed frame (api/sse.py sse_content)
GATEWAY_STREAM_ITEM = sse_item(
    ["provider_chosen", "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "done",
     "error"], json_data({"type": "object"}),
    when_event(["content_block_start", "content_block_delta", "content_block_stop"], {"properties": {
        "data": json_data({"type": "object", "required": ["index"], "properties": {"index": {"type": "integer"}}})}}),
    when_event(["done"], {"properties": {"data": json_data({"type": "object", "required": ["id", "stop_reason"]})}}),
    when_event(["error"], {"properties": {"data": json_data({"type": "object", "required": ["code", "message"]})}}),
)


def _frame(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _new_id() -> str:
    return "llm_" + secrets.token_hex(8)


@router.post("/_llm/chat", response_model=GatewayResponse, response_model_exclude_unset=True, responses={
    200: sse_content(GATEWAY_STREAM_ITEM,
                     "with `stream: true`: provider_chosen, content_block_*, message_delta, done (or error)"),
    **errors(*BODY, 404, 502)})
async def llm_chat(body: GatewayRequest, rt: Rt, who: Who) -> dict[str, Any] | StreamingResponse:
    """One model call without the agent loop (loomcycle's gateway shape; module docstring)."""
    route = gateway_route(rt, provider=body.provider, model=body.model, tier=body.tier)
    mc = to_model_call(body)
    if body.stream:
        return StreamingResponse(_stream(rt, route, mc, who, body.user_id), media_type="text/event-stream",
                                 headers=SSE_HEADERS)
    resp = await call_logged(rt, route, mc, "llm_gateway", who=who.tenant_id, user_id=body.user_id)
    return {"id": _new_id(), "request_id": mc.request_id, "provider": resp.provider, "model": resp.model,
            "content": content_json(resp), "stop_reason": resp.stop_reason, "usage": usage_json(resp)}


async def _stream(rt: Runtime, route: ModelRoute, mc: ModelCall, who: Principal,
                  user_id: str | None) -> AsyncIterator[bytes]:
    started, events = time.monotonic(), list[NewEvent]()
    index, open_text = 0, False
    try:
        async for item in stream_once(rt, route, mc, events):
            if isinstance(item, Chosen):
                yield _frame("provider_chosen", {"provider": item.provider, "model": item.model,
                                                 "request_id": mc.request_id})
            elif isinstance(item, TextDelta):
                if not open_text:
                    yield _frame("content_block_start", {"index": index, "block": {"type": "text", "text": ""}})
                    open_text = True
                delta = {"type": "text_delta", "text": item.text}
                yield _frame("content_block_delta", {"index": index, "delta": delta})
            else:
                if open_text:
                    yield _frame("content_block_stop", {"index": index})
                    index, open_text = index + 1, False
                for b in item.content:
                    if isinstance(b, ToolUseBlock):
                        block = {"type": "tool_use", "id": b.id, "name": b.name, "input": b.input}
                        yield _frame("content_block_start", {"index": index, "block": block})
                        yield _frame("content_block_stop", {"index": index})
                        index += 1
                yield _frame("message_delta", {"delta": {"stop_reason": item.stop_reason}, "usage": usage_json(item)})
                yield _frame("done", {"id": _new_id(), "stop_reason": item.stop_reason, "usage": usage_json(item)})
                log_call("llm_gateway", mc, route, who=who.tenant_id, user_id=user_id, started=started,
                         response=item, error=None, events=events)
    except ProviderError as exc:
        if open_text:
            yield _frame("content_block_stop", {"index": index})
        yield _frame("error", {"type": "provider_error", "code": exc.code, "message": exc.message})
        log_call("llm_gateway", mc, route, who=who.tenant_id, user_id=user_id, started=started, response=None,
                 error=exc, events=events)
