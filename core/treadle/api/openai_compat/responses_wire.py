"""OpenAI's Responses API on the wire: the request treadle accepts, its translation to a Chat
Completions request (one path answers both front doors: the same model routing, structured output
and agent runs), and the `response` object and its streaming events with `sequence_number`.

Why a translation: a Responses `input` is Chat's `messages` with other names (`instructions` is a
system message, `function_call` items are an assistant's `tool_calls`, `function_call_output`
items are `tool` messages, `text.format` is `response_format`), so everything chat honours —
and everything it refuses, by name — holds here too."""

from __future__ import annotations

import json
import secrets
import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from treadle.api.openai_compat.wire import ChatRequest, UnsupportedParameter, parse_request
from treadle.errors import BadRequest

#: Responses fields accepted only with these values (or null); others are refused by name
DEFAULT_ONLY: dict[str, tuple[Any, ...]] = {
    "top_p": (1, 1.0),
    "truncation": ("disabled",),
    "include": ([],),
    "max_tool_calls": (),
    "prompt": (),
    "service_tier": ("auto", "default"),
    "top_logprobs": (0,),
}


class InputText(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["input_text", "output_text"]
    text: str
    annotations: list[Any] | None = None
    logprobs: list[Any] | None = None


class InputImage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["input_image"]
    image_url: str | None = None
    detail: Literal["auto", "low", "high"] | None = None
    file_id: None = None


class MessageItem(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[InputText | InputImage]
    id: str | None = None
    status: str | None = None
    phase: str | None = None


class _CallItem(BaseModel):
    """What a function call and its output share: the call id, and the item's own id and status
    (as a response's output, or input_items, hands them back)."""

    model_config = ConfigDict(extra="forbid")
    call_id: str = Field(min_length=1, max_length=512)
    id: str | None = None
    status: str | None = None


class FunctionCallItem(_CallItem):
    type: Literal["function_call"]
    name: str = Field(min_length=1, max_length=128)
    arguments: str = ""


class FunctionCallOutputItem(_CallItem):
    type: Literal["function_call_output"]
    output: str | list[InputText]

    def text(self) -> str:
        return self.output if isinstance(self.output, str) else "".join(p.text for p in self.output)


class FunctionToolDef(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["function"]
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = Field(default=None, max_length=8192)
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Reasoning(BaseModel):
    model_config = ConfigDict(extra="forbid")
    effort: Literal["minimal", "low", "medium", "high"] | None = None


class TextConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    format: dict[str, Any] | None = None
    verbosity: Literal["medium"] | None = None


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    #: OpenAI pads delta events with random `obfuscation` text; treadle's events carry none
    include_obfuscation: Literal[False] | None = None


class ConversationRef(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1, max_length=128)


class ResponsesRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str = Field(min_length=1, max_length=256)
    input: str | list[MessageItem | FunctionCallItem | FunctionCallOutputItem] = Field(min_length=1)
    instructions: str | None = None
    tools: list[FunctionToolDef] | None = Field(default=None, max_length=128)
    tool_choice: Any = None
    text: TextConfig | None = None
    max_output_tokens: int | None = Field(default=None, ge=1, le=1_000_000)
    temperature: float | None = Field(default=None, ge=0, le=2)
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    metadata: dict[str, str] | None = Field(default=None, max_length=16)
    user: str | None = Field(default=None, max_length=256)
    safety_identifier: str | None = Field(default=None, max_length=256)
    parallel_tool_calls: bool | None = None
    reasoning: Reasoning | None = None
    #: keep the response (OpenAI's default: true) for GET, previous_response_id, input_items
    store: bool | None = None
    #: run it in the background: an agent's durable run, answered at once with `queued`
    background: bool | None = None
    previous_response_id: str | None = Field(default=None, min_length=1, max_length=128)
    #: an agent's treadle session (its id, `s_…`): the turn continues it (responses.py)
    conversation: str | ConversationRef | None = None

    @property
    def stored(self) -> bool:
        return self.store is not False

    @property
    def conversation_id(self) -> str | None:
        c = self.conversation
        return c.id if isinstance(c, ConversationRef) else c

    def item_list(self) -> list[MessageItem | FunctionCallItem | FunctionCallOutputItem]:
        return [MessageItem(role="user", content=self.input)] if isinstance(self.input, str) else self.input


def _refuse_defaults(body: dict[str, Any]) -> None:
    for name, allowed in DEFAULT_ONLY.items():
        if name in body:
            value = body.pop(name)
            if value is not None and value not in allowed:
                raise UnsupportedParameter(f"{name}={json.dumps(value)} is not supported (treadle does not apply it)",
                                           name)


def _content(item: MessageItem, where: str) -> str | list[dict[str, Any]]:
    if isinstance(item.content, str):
        return item.content
    parts: list[dict[str, Any]] = []
    for j, p in enumerate(item.content):
        if isinstance(p, InputText):
            parts.append({"type": "text", "text": p.text})
        elif p.image_url is None:
            raise UnsupportedParameter("an input_image needs image_url (a data: URL; file ids are not supported)",
                                       f"{where}.content.{j}.image_url", code="invalid_value")
        else:
            parts.append({"type": "image_url", "image_url": {"url": p.image_url,
                                                             **({"detail": p.detail} if p.detail else {})}})
    if item.role != "user" and all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


Item = MessageItem | FunctionCallItem | FunctionCallOutputItem
_ITEMS: TypeAdapter[list[Item]] = TypeAdapter(list[Item])


def parse_responses(raw: Any) -> ResponsesRequest:
    """The body as a ResponsesRequest (fields treadle cannot apply refused by name)."""
    if not isinstance(raw, dict):
        raise BadRequest("the request body must be a JSON object", code="invalid_request")
    body = dict(raw)
    _refuse_defaults(body)
    return ResponsesRequest.model_validate(body)


def to_chat(req: ResponsesRequest, history: list[dict[str, Any]] | None = None) -> ChatRequest:
    """The ChatRequest that answers `req`; `history` (the items of the previous responses, oldest
    first: their input, then their output) goes before its input."""
    messages: list[dict[str, Any]] = []
    if req.instructions:
        messages.append({"role": "developer", "content": req.instructions})
    earlier = _ITEMS.validate_python(history or [])
    for i, item in enumerate([*earlier, *req.item_list()]):
        where = f"input.{i - len(earlier)}" if i >= len(earlier) else "previous_response_id"
        if isinstance(item, MessageItem):
            messages.append({"role": item.role, "content": _content(item, where)})
        elif isinstance(item, FunctionCallItem):
            call = {"id": item.call_id, "type": "function",
                    "function": {"name": item.name, "arguments": item.arguments}}
            if messages and messages[-1]["role"] == "assistant" and "tool_calls" in messages[-1]:
                messages[-1]["tool_calls"].append(call)
            elif messages and messages[-1]["role"] == "assistant":
                messages[-1]["tool_calls"] = [call]
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        else:
            messages.append({"role": "tool", "tool_call_id": item.call_id, "content": item.text()})
    chat: dict[str, Any] = {"model": req.model, "messages": messages, "stream": bool(req.stream)}
    if req.tools:
        chat["tools"] = [{"type": "function", "function": {
            "name": t.name, "description": t.description or "", "strict": bool(t.strict),
            **({"parameters": t.parameters} if t.parameters is not None else {})}} for t in req.tools]
    if req.tool_choice is not None:
        tc = req.tool_choice
        if isinstance(tc, dict) and tc.get("type") == "function" and set(tc) == {"type", "name"}:
            tc = {"type": "function", "function": {"name": tc["name"]}}
        elif not (isinstance(tc, str) and tc in ("auto", "none", "required")):
            raise UnsupportedParameter("tool_choice: auto, none, required or {type: function, name}", "tool_choice",
                                       code="invalid_value")
        chat["tool_choice"] = tc
    fmt = req.text.format if req.text else None
    if fmt is not None:
        if fmt.get("type") == "json_schema":
            spec = {k: fmt[k] for k in ("name", "schema", "description", "strict") if k in fmt}
            extra = set(fmt) - {"type", "name", "schema", "description", "strict"}
            if extra:
                raise UnsupportedParameter(f"text.format: unknown field {sorted(extra)[0]}", "text.format",
                                           code="invalid_value")
            chat["response_format"] = {"type": "json_schema", "json_schema": spec}
        else:
            chat["response_format"] = fmt
    for name, value in (("max_completion_tokens", req.max_output_tokens), ("temperature", req.temperature),
                        ("user", req.user or req.safety_identifier), ("parallel_tool_calls", req.parallel_tool_calls),
                        ("reasoning_effort", req.reasoning.effort if req.reasoning else None)):
        if value is not None:
            chat[name] = value
    try:
        return parse_request(chat)
    except UnsupportedParameter as exc:
        exc.param = {"max_completion_tokens": "max_output_tokens", "response_format": "text.format",
                     "reasoning_effort": "reasoning.effort",
                     "messages": "input"}.get(exc.param, exc.param.replace("messages.", "input."))
        raise


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


def usage_json(input_tokens: int, output_tokens: int, cached: int = 0, cache_write: int = 0) -> dict[str, Any]:
    details = {"cached_tokens": cached, "cache_write_tokens": cache_write}
    return {"input_tokens": input_tokens, "input_tokens_details": details,
            "output_tokens": output_tokens, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input_tokens + output_tokens}


class ResponseDoc:
    """One response: its id, the request's echoed settings, the output items as they complete,
    and the numbered stream events built from them. Item ids are derived from the response id and
    the item's place, so a response rebuilt from its run's transcript (a GET, a resumed stream,
    another process) has the same ids and the same events as the first telling."""

    def __init__(self, req: ResponsesRequest, extension: dict[str, Any], *, response_id: str | None = None,
                 created_at: int | None = None) -> None:
        self.id = response_id or new_id("resp")
        self.created_at = created_at if created_at is not None else int(time.time())
        self.req = req
        self.output: list[dict[str, Any]] = []
        self.seq = 0
        self.extension = extension
        self.final: dict[str, Any] | None = None  # the finished document (completed / incomplete / failed)

    def item_id(self, prefix: str, index: int) -> str:
        return f"{prefix}_{self.id.removeprefix('resp_')}{index:03d}"

    def doc(self, status: str, usage: dict[str, Any] | None = None, error: dict[str, str] | None = None,
            incomplete: str | None = None) -> dict[str, Any]:
        r = self.req
        tc = r.tool_choice if r.tool_choice is not None else "auto"
        return {
            "id": self.id, "object": "response", "created_at": self.created_at, "status": status,
            "background": bool(r.background), "error": error,
            "incomplete_details": {"reason": incomplete} if incomplete else None,
            "instructions": r.instructions, "max_output_tokens": r.max_output_tokens, "model": r.model,
            "output": list(self.output), "parallel_tool_calls": r.parallel_tool_calls is not False,
            "previous_response_id": r.previous_response_id,
            "conversation": {"id": r.conversation_id} if r.conversation_id else None,
            "reasoning": r.reasoning.model_dump() if r.reasoning else None,
            "store": r.stored, "text": {"format": (r.text.format if r.text and r.text.format else {"type": "text"})},
            "tool_choice": tc, "tools": [_tool_json(t) for t in r.tools or ()],
            "truncation": "disabled", "usage": usage, "user": r.user, "metadata": r.metadata or {},
            # the sampling fields every response carries (OpenAI's and the Open Responses schema):
            # the only values treadle accepts, or the temperature asked for (1: the default)
            "temperature": 1.0 if r.temperature is None else r.temperature, "top_p": 1.0,
            "presence_penalty": 0.0, "frequency_penalty": 0.0, "top_logprobs": 0, "max_tool_calls": None,
            "service_tier": "default", "safety_identifier": r.safety_identifier, "prompt_cache_key": None,
            # not recorded: a retelling derived from the run's transcript must equal the first one
            "completed_at": None,
            "treadle": self.extension,
        }

    def event(self, type_: str, **fields: Any) -> tuple[int, bytes]:
        """(sequence_number, the SSE frame)."""
        seq = self.seq
        doc = {"type": type_, "sequence_number": seq, **fields}
        self.seq += 1
        return seq, f"event: {type_}\ndata: {json.dumps(doc, separators=(',', ':'))}\n\n".encode()


def _tool_json(t: FunctionToolDef) -> dict[str, Any]:
    """A function tool as a response echoes it: every field, null where not given."""
    return {"type": "function", "name": t.name, "description": t.description, "parameters": t.parameters,
            "strict": t.strict}


def message_item(item_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    content = [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}] if status == "completed" \
        else []
    return {"id": item_id, "type": "message", "role": "assistant", "status": status, "content": content}


def function_call_item(item_id: str, call: dict[str, Any]) -> dict[str, Any]:
    """A chat `tool_calls` entry as a Responses `function_call` item."""
    fn = call["function"]
    return {"id": item_id, "type": "function_call", "status": "completed", "call_id": call["id"],
            "name": fn["name"], "arguments": fn["arguments"]}


def input_items(req: ResponsesRequest, response_id: str) -> list[dict[str, Any]]:
    """The request's input as the items GET /v1/responses/{id}/input_items lists (each with an id)."""
    base = response_id.removeprefix("resp_")
    out: list[dict[str, Any]] = []
    for i, item in enumerate(req.item_list()):
        if isinstance(item, MessageItem):
            kind = "output_text" if item.role == "assistant" else "input_text"
            parts = [{"type": kind, "text": item.content}] if isinstance(item.content, str) else \
                [p.model_dump(exclude_none=True) for p in item.content]
            if item.role == "assistant":
                parts = [{"annotations": [], **p} for p in parts]
            out.append({"id": item.id or f"msg_{base}i{i:03d}", "type": "message", "role": item.role,
                        "status": "completed", "content": parts})
        else:
            prefix = "fc" if isinstance(item, FunctionCallItem) else "fco"
            out.append({**item.model_dump(exclude_none=True), "id": item.id or f"{prefix}_{base}i{i:03d}",
                        "status": "completed"})
    return out
