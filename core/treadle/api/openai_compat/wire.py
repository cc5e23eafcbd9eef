"""OpenAI Chat Completions on the wire: the request treadle accepts (every field honoured or
refused with `unsupported_parameter` / `unknown_parameter` naming it), its translation to
treadle's content blocks, and the `chat.completion` / `chat.completion.chunk` shapes."""

from __future__ import annotations

import json
import re
import secrets
import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from treadle.api.openai_compat.structured import ResponseFormat, ToolChoice, Wish, schema_problem
from treadle.domain.content import Block, ImageBlock, Message, TextBlock, ToolResultBlock, ToolUseBlock
from treadle.errors import BadRequest
from treadle.providers.base import ToolSpec

#: fields OpenAI defines that treadle cannot apply: accepted only with their default value (or null)
DEFAULT_ONLY: dict[str, tuple[Any, ...]] = {
    "n": (1,),
    "top_p": (1, 1.0),
    "presence_penalty": (0, 0.0),
    "frequency_penalty": (0, 0.0),
    "logprobs": (False,),
    "store": (False,),
}
DATA_URL = re.compile(r"^data:(image/(?:png|jpeg|gif|webp));base64,([A-Za-z0-9+/=\s]+)$")


class UnsupportedParameter(BadRequest):
    """A request field treadle does not apply (refused rather than ignored); `param` names it."""

    code = "unsupported_parameter"

    def __init__(self, message: str, param: str, *, code: str | None = None) -> None:
        super().__init__(message, code=code)
        self.param = param


class TextPart(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["text"]
    text: str


class ImageUrl(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url: str
    detail: Literal["auto", "low", "high"] | None = None


class ImagePart(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["image_url"]
    image_url: ImageUrl


class FunctionCall(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=128)
    arguments: str = ""


class ToolCallIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1, max_length=512)
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart | ImagePart] | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = Field(default=None, max_length=512)
    # an assistant message echoed back from a response (the SDK's model_dump) carries these empty
    refusal: None = None
    annotations: list[Any] | None = Field(default=None, max_length=0)
    audio: None = None
    function_call: None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(p.text for p in self.content if isinstance(p, TextPart))
        return self.content or ""

    def has_images(self) -> bool:
        return isinstance(self.content, list) and any(isinstance(p, ImagePart) for p in self.content)


class FunctionDef(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str = Field(default="", max_length=8192)
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    strict: bool | None = None  # true: the call's arguments are checked against `parameters` (structured.py)


class FunctionTool(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["function"]
    function: FunctionDef

    def spec(self) -> ToolSpec:
        return ToolSpec(self.function.name, self.function.description,
                        {"type": "object", **self.function.parameters})


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    include_usage: bool = False


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str = Field(min_length=1, max_length=256)
    messages: list[ChatMessage] = Field(min_length=1, max_length=4096)
    tools: list[FunctionTool] | None = Field(default=None, max_length=128)
    max_tokens: int | None = Field(default=None, ge=1, le=1_000_000)
    max_completion_tokens: int | None = Field(default=None, ge=1, le=1_000_000)
    temperature: float | None = Field(default=None, ge=0, le=2)
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    user: str | None = Field(default=None, max_length=256)
    response_format: ResponseFormat | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    reasoning_effort: Literal["minimal", "low", "medium", "high"] | None = None

    @field_validator("tools")
    @classmethod
    def _unique(cls, v: list[FunctionTool] | None) -> list[FunctionTool] | None:
        names = [t.function.name for t in v or ()]
        if len(set(names)) != len(names):
            raise ValueError("tool names repeat")
        return v

    @property
    def token_cap(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    @property
    def wish(self) -> Wish:
        strict = {t.function.name: {"type": "object", **t.function.parameters}
                  for t in self.tools or () if t.function.strict}
        return Wish(self.response_format, self.tool_choice, self.parallel_tool_calls, self.reasoning_effort, strict)

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


def parse_request(raw: Any) -> ChatRequest:
    """The body as a ChatRequest; an OpenAI field treadle cannot apply is refused unless it
    carries its default value (UnsupportedParameter names it)."""
    if not isinstance(raw, dict):
        raise BadRequest("the request body must be a JSON object", code="invalid_request")
    body = dict(raw)
    for name, defaults in DEFAULT_ONLY.items():
        if name in body:
            value = body.pop(name)
            if value is not None and value not in defaults:
                raise UnsupportedParameter(
                    f"{name}={json.dumps(value)} is not supported by treadle (only {json.dumps(defaults[0])})", name)
    if body.get("stream_options") is not None and not body.get("stream"):
        raise UnsupportedParameter("stream_options applies only with stream: true", "stream_options",
                                   code="invalid_value")
    req = ChatRequest.model_validate(body)
    problem = schema_problem(req.response_format)
    if problem:
        raise UnsupportedParameter(problem, "response_format", code="invalid_value")
    choice = req.wish.choice
    names = {t.function.name for t in req.tools or ()}
    if choice in ("required",) and not names:
        raise UnsupportedParameter("tool_choice required needs tools", "tool_choice", code="invalid_value")
    if choice and choice.startswith("fn:") and choice[3:] not in names:
        raise UnsupportedParameter(f"tool_choice names {choice[3:]!r}, which is not one of the request's tools",
                                   "tool_choice", code="invalid_value")
    return req


def _image(part: ImagePart, where: str) -> ImageBlock:
    m = DATA_URL.match(part.image_url.url)
    if m is None:
        raise UnsupportedParameter("only data: URLs of png, jpeg, gif or webp images are accepted (treadle fetches "
                                   "no image URLs)", f"{where}.image_url.url", code="invalid_value")
    return ImageBlock(m.group(1), re.sub(r"\s", "", m.group(2)))


def tool_arguments(call: ToolCallIn, where: str) -> dict[str, Any]:
    try:
        args = json.loads(call.function.arguments) if call.function.arguments.strip() else {}
    except json.JSONDecodeError:
        args = None
    if not isinstance(args, dict):
        raise UnsupportedParameter("function.arguments must be a JSON object encoded as a string",
                                   f"{where}.function.arguments", code="invalid_value")
    return args


def to_conversation(req: ChatRequest) -> tuple[str, list[Message]]:
    """(system text, messages): system/developer messages join the system text; tool messages
    become tool_result blocks of a user turn; consecutive turns of one role merge."""
    system: list[str] = []
    out: list[Message] = []
    for i, m in enumerate(req.messages):
        where = f"messages.{i}"
        if m.tool_calls and m.role != "assistant":
            raise UnsupportedParameter("only an assistant message carries tool_calls", f"{where}.tool_calls",
                                       code="invalid_value")
        blocks: list[Block]
        if m.role in ("system", "developer"):
            if m.has_images():
                raise UnsupportedParameter("a system message holds text only", f"{where}.content",
                                           code="invalid_value")
            system.append(m.text())
            continue
        if m.role == "user":
            parts = m.content if isinstance(m.content, list) else [TextPart(type="text", text=m.text())]
            blocks = [TextBlock(p.text) if isinstance(p, TextPart) else _image(p, f"{where}.content.{j}")
                      for j, p in enumerate(parts)]
            role = "user"
        elif m.role == "assistant":
            if m.has_images():
                raise UnsupportedParameter("an assistant message holds text only", f"{where}.content",
                                           code="invalid_value")
            blocks = [TextBlock(m.text())] if m.text() else []
            blocks += [ToolUseBlock(tc.id, tc.function.name, tool_arguments(tc, f"{where}.tool_calls.{k}"))
                       for k, tc in enumerate(m.tool_calls or ())]
            role = "assistant"
        else:
            if not m.tool_call_id:
                raise UnsupportedParameter("a tool message needs tool_call_id", f"{where}.tool_call_id",
                                           code="missing_required_parameter")
            blocks, role = [ToolResultBlock(m.tool_call_id, m.text())], "user"
        if out and out[-1].role == role:
            out[-1].content.extend(blocks)
        else:
            out.append(Message(role, blocks))  # type: ignore[arg-type]
    if not out:
        raise UnsupportedParameter("messages: at least one user message is required", "messages",
                                   code="invalid_value")
    return "\n\n".join(system), out


FINISH = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "max_iterations": "length",
          "tool_use": "tool_calls"}


def finish_reason(stop_reason: str | None) -> str:
    return FINISH.get(stop_reason or "", "stop")


def new_completion_id() -> str:
    return "chatcmpl-" + secrets.token_hex(12)


def tool_call_json(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def usage_json(input_tokens: int, output_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": input_tokens, "completion_tokens": output_tokens,
            "total_tokens": input_tokens + output_tokens}


class Completion:
    """One response's id, creation time and model name, and the shapes built from them."""

    def __init__(self, model: str, extension: dict[str, Any]) -> None:
        self.id = new_completion_id()
        self.created = int(time.time())
        self.model = model
        #: treadle's own facts about the answer (run id, provider, model), under the key "treadle"
        self.extension = extension

    def message(self, text: str, tool_calls: list[dict[str, Any]], finish: str, usage: dict[str, int]
                ) -> dict[str, Any]:
        msg: dict[str, Any] = {"role": "assistant", "content": text or None}
        if tool_calls:
            msg["tool_calls"] = tool_calls
        return {"id": self.id, "object": "chat.completion", "created": self.created, "model": self.model,
                "choices": [{"index": 0, "message": msg, "finish_reason": finish, "logprobs": None}],
                "usage": usage, "treadle": self.extension}

    def chunk(self, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}

    def usage_chunk(self, usage: dict[str, int]) -> dict[str, Any]:
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "choices": [], "usage": usage, "treadle": self.extension}


def data_frame(doc: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(doc, separators=(',', ':'))}\n\n".encode()


DONE_FRAME = b"data: [DONE]\n\n"
