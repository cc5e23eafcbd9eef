"""OpenAI Chat Completions (`POST {base_url}/chat/completions`, `stream: true`), and the vendors
that speak it: DeepSeek and Ollama (local and cloud) are dialects of this one driver.

Wire facts this driver relies on:
- `Authorization: Bearer <key>`; `stream_options: {include_usage: true}` adds a last chunk with
  `choices: []` and the `usage`; the stream ends with `data: [DONE]`;
- `choices[0].delta` carries `content`, and `tool_calls[]` fragments keyed by `index` (the first
  fragment has `id` and `function.name`, later ones append to `function.arguments`, a JSON
  string); `finish_reason` is `stop` | `tool_calls` | `length` | `content_filter`;
- a tool result is a `{"role": "tool", "tool_call_id", "content"}` message;
- errors are `{"error": {"message", "type", "param", "code"}}` (a stream may also carry one).

Dialects: DeepSeek streams `reasoning_content` and wants it back on assistant turns that called
tools, and wants `content` on every tool (and assistant) message even when empty; Ollama streams
`reasoning`, serves `/v1/chat/completions` at the server root, may take minutes to send the first
byte of a cold model, and reports the model's context window from `POST /api/show`.

Options: `temperature`, `reasoning_effort`, `context_window` (overrides what the server reports).
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from typing import Any

from treadle.domain.content import (
    Block,
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from treadle.providers.base import DeltaSink, ModelRequest, ModelResponse, Usage
from treadle.providers.http import Endpoint, HttpDriver, StreamAssembly, VendorError, json_or_none

log = logging.getLogger("treadle.providers")

FINISH = {"stop": "end_turn", "tool_calls": "tool_use", "function_call": "tool_use", "length": "max_tokens"}


@dataclass(frozen=True, slots=True)
class Dialect:
    name: str
    chat_path: str = "/chat/completions"
    max_tokens_field: str = "max_tokens"
    reasoning_fields: tuple[str, ...] = ()  # delta fields that carry reasoning text
    echo_reasoning: bool = False  # send reasoning_content back on assistant turns that called tools
    always_content: bool = False  # never send content null
    reports_context_window: bool = False  # POST /api/show


OPENAI = Dialect("openai", max_tokens_field="max_completion_tokens")
DEEPSEEK = Dialect(
    "deepseek", reasoning_fields=("reasoning_content",), echo_reasoning=True, always_content=True
)
OLLAMA = Dialect(
    "ollama",
    chat_path="/v1/chat/completions",
    reasoning_fields=("reasoning", "reasoning_content"),
    always_content=True,
    reports_context_window=True,
)
DIALECTS = {d.name: d for d in (OPENAI, DEEPSEEK, OLLAMA)}


class OpenAIChatProvider(HttpDriver):
    driver = "openai"

    def __init__(self, endpoint: Endpoint, dialect: Dialect = OPENAI) -> None:
        super().__init__(endpoint)
        self.dialect = dialect
        self._windows: dict[str, int | None] = {}

    @property
    def reasoning_format(self) -> str | None:  # type: ignore[override]
        return "deepseek" if self.dialect.echo_reasoning else None

    def build_body(self, req: ModelRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": req.model,
            "messages": encode_messages(req.system, req.messages, self.dialect),
            "stream": True,
            "stream_options": {"include_usage": True},
            self.dialect.max_tokens_field: req.max_tokens,
        }
        if req.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {"name": t.name, "description": t.description, "parameters": t.input_schema},
                }
                for t in req.tools
            ]
        for opt in ("temperature", "reasoning_effort", "top_p", "frequency_penalty", "presence_penalty", "seed",
                    "stop"):
            if opt in req.options:
                body[opt] = req.options[opt]
        choice = req.options.get("tool_choice")  # none | required | {"name": n} (api/openai_compat/structured.py)
        if req.tools and choice is not None:
            body["tool_choice"] = choice if isinstance(choice, str) else {
                "type": "function", "function": {"name": choice["name"]}}
        if req.tools and req.options.get("parallel_tool_calls") is False:
            body["parallel_tool_calls"] = False
        if self.endpoint.driver == "openai" and "response_format" in req.options:
            body["response_format"] = req.options["response_format"]  # others get it as an instruction only
        if self.endpoint.driver == "openai" and req.options.get("effort") and "reasoning_effort" not in body:
            body["reasoning_effort"] = req.options["effort"]  # loomcycle's effort on OpenAI
        return body

    async def list_models(self, timeout_s: float = 10.0) -> list[str]:
        """`GET /models` beside the chat path (OpenAI, DeepSeek, Ollama's OpenAI-compatible API)."""
        url = self.endpoint.base_url + self.dialect.chat_path.replace("/chat/completions", "/models")
        headers = {**self._headers(self.api_key()), "accept": "application/json"}
        return self.listed(await self.get_json(url, headers, timeout_s), "data", "id")

    def _headers(self, key: str | None) -> dict[str, str]:
        headers = {"content-type": "application/json", "accept": "text/event-stream"}
        if key:
            headers["authorization"] = f"Bearer {key}"
        return headers

    async def call(self, req: ModelRequest, on_delta: DeltaSink | None = None) -> ModelResponse:
        key = self.require_key(req.model)
        headers = self._headers(key)
        state = _Stream(self, req.model, on_delta)
        url = self.endpoint.base_url + self.dialect.chat_path
        await self.stream(url, headers, self.build_body(req), state, model=req.model)
        content = state.blocks()
        stop = FINISH.get(state.finish_reason or "stop", state.finish_reason or "end_turn")
        if any(isinstance(b, ToolUseBlock) for b in content):
            stop = "tool_use"
        return state.response(content, stop, max_context_tokens=await self.context_window(req, headers))

    async def context_window(self, req: ModelRequest, headers: dict[str, str]) -> int | None:
        configured = req.options.get("context_window")
        if isinstance(configured, int) and configured > 0:
            return configured
        if not self.dialect.reports_context_window:
            return None
        if req.model not in self._windows:
            doc = await self.post_json(
                f"{self.endpoint.base_url}/api/show",
                {k: v for k, v in headers.items() if k != "accept"},
                {"model": req.model},
                timeout_s=self.endpoint.connect_s,
            )
            self._windows[req.model] = _ollama_window(doc)
        return self._windows[req.model]

    def parse_error(self, status: int, body: bytes) -> VendorError:
        doc = json_or_none(body)
        return _vendor_error(doc, body.decode("utf-8", "replace"), status)


def _vendor_error(doc: Any, raw: str, status: int | None) -> VendorError:
    err = doc.get("error") if isinstance(doc, dict) else None
    if isinstance(err, str):  # Ollama: {"error": "model \"x\" not found, try pulling it first"}
        err = {"message": err}
    if not isinstance(err, dict):
        return VendorError(raw[:500] or f"HTTP {status}")
    msg = str(err.get("message") or "")
    code = err.get("code") or err.get("type")
    low = msg.lower()
    code_s = str(code) if code is not None else None
    return VendorError(
        msg or (code_s or "error"),
        code=code_s,
        auth=code_s in ("invalid_api_key", "authentication_error") or ("api key" in low and status in (400, 401, 403)),
        context_exceeded=code_s == "context_length_exceeded"
        or "maximum context length" in low
        or ("context length" in low and "exceed" in low),
        unknown_model=code_s == "model_not_found" or ("model" in low and "not found" in low) or "does not exist" in low,
        retryable=code_s in ("server_error", "overloaded", "rate_limit_exceeded"),
    )


def _ollama_window(doc: Any) -> int | None:
    """`num_ctx` from the model's parameters if set, else `<arch>.context_length` from model_info."""
    if not isinstance(doc, dict):
        return None
    params = doc.get("parameters")
    if isinstance(params, str):
        m = re.search(r"^\s*num_ctx\s+(\d+)", params, re.MULTILINE)
        if m:
            return int(m.group(1))
    info = doc.get("model_info")
    if isinstance(info, dict):
        for k, v in info.items():
            if k.endswith(".context_length") and isinstance(v, int) and v > 0:
                return v
    return None


def encode_messages(system: str, messages: list[Message], dialect: Dialect) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if system:
        out.append({"role": "system", "content": system})
    for m in messages:
        if m.role == "assistant":
            out.append(_assistant(m, dialect))
            continue
        for b in m.content:
            if isinstance(b, ToolResultBlock):
                text = f"[tool error] {b.content}" if b.is_error else b.content
                out.append({"role": "tool", "tool_call_id": b.tool_use_id, "content": text})
        parts: list[dict[str, Any]] = []
        for b in m.content:
            if isinstance(b, TextBlock) and b.text:
                parts.append({"type": "text", "text": b.text})
            elif isinstance(b, ImageBlock):
                parts.append({"type": "image_url", "image_url": {"url": f"data:{b.media_type};base64,{b.data}"}})
        if parts:
            if all(p["type"] == "text" for p in parts):
                out.append({"role": "user", "content": "\n\n".join(p["text"] for p in parts)})
            else:
                out.append({"role": "user", "content": parts})
    return out


def _assistant(m: Message, dialect: Dialect) -> dict[str, Any]:
    text = "".join(b.text for b in m.content if isinstance(b, TextBlock))
    uses = m.tool_uses()
    msg: dict[str, Any] = {"role": "assistant", "content": text or ("" if dialect.always_content or not uses else None)}
    if uses:
        msg["tool_calls"] = [
            {
                "id": tu.id,
                "type": "function",
                "function": {"name": tu.name, "arguments": json.dumps(tu.input, separators=(",", ":"))},
            }
            for tu in uses
        ]
        if dialect.echo_reasoning:
            reasoning = "".join(
                b.thinking for b in m.content if isinstance(b, ThinkingBlock) and b.source == "deepseek"
            )
            if reasoning:
                msg["reasoning_content"] = reasoning
    return msg


class _Stream(StreamAssembly):
    """Assembles one streamed chat completion from its chunks."""

    def __init__(self, driver: OpenAIChatProvider, model: str, on_delta: DeltaSink | None) -> None:
        super().__init__(driver, model, on_delta)
        self.driver: OpenAIChatProvider = driver
        self.saw_done = False
        self.finish_reason: str | None = None
        self.calls: dict[int, dict[str, Any]] = {}

    @property
    def done(self) -> bool:
        # some compatible servers end after the finish chunk without `[DONE]`
        return self.saw_done or self.finish_reason is not None

    async def feed(self, event: str, data: str) -> None:
        if data.strip() == "[DONE]":
            self.saw_done = True
            return
        chunk = json.loads(data)
        if not isinstance(chunk, dict):
            raise self.driver.malformed(self.req_model, "a chunk is not a JSON object")
        if "error" in chunk:
            raise self.driver.error_from(_vendor_error(chunk, data, None), self.req_model)
        if chunk.get("model"):
            self.model = str(chunk["model"])
        if isinstance(chunk.get("usage"), dict):
            self._usage(chunk["usage"])
        for choice in chunk.get("choices") or []:
            if int(choice.get("index", 0)) != 0:
                continue
            delta = choice.get("delta") or {}
            for field in self.driver.dialect.reasoning_fields:
                r = delta.get(field)
                if r:
                    await self.add_reasoning(str(r))
                    break
            content = delta.get("content")
            if content:
                await self.add_text(str(content))
            for tc in delta.get("tool_calls") or []:
                slot = self.calls.setdefault(int(tc.get("index", len(self.calls))), {"id": "", "name": "", "args": ""})
                if tc.get("id"):
                    slot["id"] = str(tc["id"])
                fn = tc.get("function") or {}
                if fn.get("name"):
                    slot["name"] = str(fn["name"])
                if fn.get("arguments"):
                    slot["args"] += str(fn["arguments"])
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])

    def _usage(self, u: dict[str, Any]) -> None:
        prompt = int(u.get("prompt_tokens") or 0)
        cached = 0
        details = u.get("prompt_tokens_details")
        if isinstance(details, dict):
            cached = int(details.get("cached_tokens") or 0)
        if "prompt_cache_hit_tokens" in u:  # DeepSeek
            cached = int(u.get("prompt_cache_hit_tokens") or 0)
        self.usage = Usage(
            input_tokens=max(0, prompt - cached),
            output_tokens=int(u.get("completion_tokens") or 0),
            cache_read_input_tokens=cached,
        )

    def blocks(self) -> list[Block]:
        out: list[Block] = []
        if self.reasoning:
            source = "deepseek" if self.driver.dialect.echo_reasoning else self.driver.dialect.name
            out.append(ThinkingBlock("".join(self.reasoning), None, source=source))
        if self.text:
            out.append(TextBlock("".join(self.text)))
        for _, c in sorted(self.calls.items()):
            if not c["name"]:
                raise self.driver.malformed(self.req_model, "a tool call has no function name")
            out.append(ToolUseBlock(c["id"], c["name"], _arguments(c["args"], c["name"])))
        return out


def _arguments(raw: str, name: str) -> dict[str, Any]:
    """The model's JSON arguments; a model that wrote invalid JSON gets it back through the tool's
    error result instead of failing the run."""
    if not raw.strip():
        return {}
    try:
        args = json.loads(raw)
    except ValueError:
        log.warning("tool call %s: arguments are not valid JSON", name)
        return {"_invalid_arguments": raw}
    return args if isinstance(args, dict) else {"_invalid_arguments": raw}
