"""Anthropic Messages API (`POST /v1/messages`, `stream: true`).

Wire facts this driver relies on:
- headers `x-api-key`, `anthropic-version: 2023-06-01`;
- the stream is `message_start`, then per content block `content_block_start` →
  `content_block_delta`* → `content_block_stop`, then `message_delta` (stop_reason, usage) and
  `message_stop`; `ping` may appear anywhere; an `error` event can end the stream early;
- deltas are `text_delta`, `input_json_delta` (tool input as partial JSON), `thinking_delta` and
  `signature_delta`; thinking blocks must be sent back unchanged, signature included;
- `cache_control: {type: ephemeral}` on the last system block, the last tool and the last block of
  the history (the growing conversation: the next call reads it all from the cache and writes only
  what is new) — 3 of the 4 breakpoints allowed; never on a thinking block or an empty text;
- errors are `{"type": "error", "error": {"type": "...", "message": "..."}}`.

Options (provider or alias `options:`): `thinking_budget_tokens`, `temperature`, `cache_control`
(default true).
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import quote

from treadle.domain.content import (
    Block,
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from treadle.providers.base import DeltaSink, ModelRequest, ModelResponse
from treadle.providers.http import HttpDriver, StreamAssembly, VendorError, json_or_none

ANTHROPIC_VERSION = "2023-06-01"
_ID_OK = re.compile(r"[^A-Za-z0-9_-]")
RETRYABLE_TYPES = {"overloaded_error", "api_error", "rate_limit_error", "timeout_error"}


def mark_history(messages: list[dict[str, Any]]) -> None:
    """A cache breakpoint on the last block of the last message that can hold one (not a thinking
    block, not an empty text): the prefix up to it is written to the cache, and the next call of the
    conversation — the same prefix and more — reads it back."""
    for message in reversed(messages):
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for block in reversed(content):
            if block.get("type") in ("thinking", "redacted_thinking") or (
                    block.get("type") == "text" and not block.get("text")):
                continue
            block["cache_control"] = {"type": "ephemeral"}
            return


def wire_id(tool_id: str) -> str:
    """Anthropic accepts tool ids matching [A-Za-z0-9_-]+ (ids from other vendors may not)."""
    return _ID_OK.sub("_", tool_id) or "toolu_empty"


class AnthropicProvider(HttpDriver):
    driver = "anthropic"
    reasoning_format = "anthropic"

    def build_body(self, req: ModelRequest) -> dict[str, Any]:
        opts = req.options
        cache = opts.get("cache_control", True) is not False
        body: dict[str, Any] = {
            "model": req.model,
            "max_tokens": req.max_tokens,
            "stream": True,
            "messages": encode_messages(req.messages),
        }
        if cache:
            mark_history(body["messages"])
        if req.system:
            block: dict[str, Any] = {"type": "text", "text": req.system}
            if cache:
                block["cache_control"] = {"type": "ephemeral"}
            body["system"] = [block]
        if req.tools:
            tools: list[dict[str, Any]] = [
                {"name": t.name, "description": t.description, "input_schema": t.input_schema} for t in req.tools
            ]
            if cache:
                tools[-1]["cache_control"] = {"type": "ephemeral"}
            body["tools"] = tools
        choice = opts.get("tool_choice")  # none | required | {"name": n} (api/openai_compat/structured.py)
        if req.tools and choice is not None:
            body["tool_choice"] = ({"type": "none"} if choice == "none" else {"type": "any"} if choice == "required"
                                   else {"type": "tool", "name": choice["name"]})
        if req.tools and opts.get("parallel_tool_calls") is False:
            body["tool_choice"] = {**body.get("tool_choice", {"type": "auto"}), "disable_parallel_tool_use": True}
        budget = opts.get("thinking_budget_tokens")
        if budget is None and opts.get("effort") and "haiku" not in req.model:  # loomcycle's effort mapping
            budget = {"medium": 2048, "high": 8192}.get(str(opts["effort"]))
        if isinstance(budget, int) and budget > 0 and _thinking_allowed(req.messages):
            body["thinking"] = {"type": "enabled", "budget_tokens": budget}
            if budget >= req.max_tokens:  # the API wants max_tokens > budget_tokens
                body["max_tokens"] = budget + req.max_tokens
        elif "temperature" in opts:
            body["temperature"] = opts["temperature"]
        for opt in ("top_p", "top_k"):  # a run's loomcycle `sampling` (engine/step.py)
            if opt in opts and "thinking" not in body:
                body[opt] = opts[opt]
        if opts.get("stop"):
            body["stop_sequences"] = list(opts["stop"])
        return body

    async def list_models(self, timeout_s: float = 10.0) -> list[str]:
        """`GET /v1/models`, page after page (`has_more`, `after_id`; at most 10 pages)."""
        headers = {"x-api-key": self.api_key() or "", "anthropic-version": ANTHROPIC_VERSION,
                   "accept": "application/json"}
        out: list[str] = []
        url = f"{self.endpoint.base_url}/v1/models?limit=1000"
        for _ in range(10):
            doc = await self.get_json(url, headers, timeout_s)
            out += self.listed(doc, "data", "id")
            if not doc.get("has_more") or not out:
                break
            url = f"{self.endpoint.base_url}/v1/models?limit=1000&after_id={quote(out[-1], safe='')}"
        return out

    async def call(self, req: ModelRequest, on_delta: DeltaSink | None = None) -> ModelResponse:
        key = self.require_key(req.model)
        headers = {
            "x-api-key": key or "",
            "anthropic-version": ANTHROPIC_VERSION,
            "content-type": "application/json",
            "accept": "text/event-stream",
        }
        state = _Stream(self, req.model, on_delta)
        url = f"{self.endpoint.base_url}/v1/messages"
        await self.stream(url, headers, self.build_body(req), state, model=req.model)
        return state.response(state.blocks(), state.stop_reason or "end_turn")

    def parse_error(self, status: int, body: bytes) -> VendorError:
        doc = json_or_none(body)
        return _vendor_error(doc if isinstance(doc, dict) else None, body.decode("utf-8", "replace"), status)


def _vendor_error(doc: dict[str, Any] | None, raw: str, status: int | None) -> VendorError:
    err = doc.get("error") if doc else None
    if not isinstance(err, dict):
        return VendorError(raw[:500] or f"HTTP {status}", retryable=status == 529)
    etype = str(err.get("type") or "") or None
    msg = str(err.get("message") or "")
    low = msg.lower()
    return VendorError(
        msg or (etype or "error"),
        code=etype,
        auth=etype in ("authentication_error", "permission_error"),
        context_exceeded=etype == "invalid_request_error"
        and ("prompt is too long" in low or "context window" in low or "context length" in low),
        unknown_model=etype == "not_found_error" and "model" in low,
        retryable=etype in RETRYABLE_TYPES,
    )


def _thinking_allowed(messages: list[Message]) -> bool:
    """With thinking on, an assistant turn that used tools must open with its thinking block; a
    transcript whose last tool turn came from a provider without one is sent with thinking off."""
    for m in reversed(messages):
        if m.role == "assistant" and m.tool_uses():
            return bool(m.content) and isinstance(m.content[0], ThinkingBlock)
        if m.role == "user" and not any(isinstance(b, ToolResultBlock) for b in m.content):
            return True
    return True


def encode_messages(messages: list[Message]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in messages:
        content = [c for c in (_encode_block(b) for b in m.content) if c is not None]
        if m.role == "user":
            # tool_result blocks must open a user turn
            content.sort(key=lambda c: 0 if c["type"] == "tool_result" else 1)
        if not content:
            continue
        if out and out[-1]["role"] == m.role:
            out[-1]["content"].extend(content)
        else:
            out.append({"role": m.role, "content": content})
    return out


def _encode_block(b: Block) -> dict[str, Any] | None:
    if isinstance(b, TextBlock):
        return {"type": "text", "text": b.text} if b.text else None
    if isinstance(b, ToolUseBlock):
        return {"type": "tool_use", "id": wire_id(b.id), "name": b.name, "input": b.input}
    if isinstance(b, ToolResultBlock):
        res: dict[str, Any] = {"type": "tool_result", "tool_use_id": wire_id(b.tool_use_id), "content": b.content}
        if b.is_error:
            res["is_error"] = True
        return res
    if isinstance(b, ThinkingBlock):
        # the resolver has already dropped thinking this provider cannot verify
        if b.signature and b.source in ("anthropic", None):
            return {"type": "thinking", "thinking": b.thinking, "signature": b.signature}
        return None
    if isinstance(b, ImageBlock):
        return {"type": "image", "source": {"type": "base64", "media_type": b.media_type, "data": b.data}}
    return None


class _Stream(StreamAssembly):
    """Assembles one streamed message from Anthropic's events (content blocks by index)."""

    def __init__(self, driver: AnthropicProvider, model: str, on_delta: DeltaSink | None) -> None:
        super().__init__(driver, model, on_delta)
        self.done = False
        self.started = False
        self.stop_reason: str | None = None
        self._blocks: dict[int, dict[str, Any]] = {}

    async def feed(self, event: str, data: str) -> None:
        doc = json.loads(data)
        etype = doc.get("type", event)
        if etype == "ping":
            return
        if etype == "error":
            err = doc if isinstance(doc, dict) else {}
            raise self.driver.error_from(_vendor_error(err, data, None), self.req_model)
        if etype == "message_start":
            msg = doc["message"]
            self.started = True
            self.model = str(msg.get("model") or "")
            self._usage(msg.get("usage") or {})
            return
        if not self.started:
            raise self.driver.malformed(self.req_model, f"{etype!r} before message_start")
        if etype == "content_block_start":
            cb = dict(doc["content_block"])
            cb["_json"] = ""
            self._blocks[int(doc["index"])] = cb
        elif etype == "content_block_delta":
            block = self._blocks.get(int(doc["index"]))
            if block is None:
                raise self.driver.malformed(self.req_model, f"delta for unknown block {doc['index']}")
            await self._delta(block, doc["delta"])
        elif etype == "content_block_stop":
            if int(doc["index"]) not in self._blocks:
                raise self.driver.malformed(self.req_model, f"stop for unknown block {doc['index']}")
        elif etype == "message_delta":
            delta = doc.get("delta") or {}
            if delta.get("stop_reason"):
                self.stop_reason = str(delta["stop_reason"])
            self._usage(doc.get("usage") or {})
        elif etype == "message_stop":
            self.done = True

    async def _delta(self, cb: dict[str, Any], delta: dict[str, Any]) -> None:
        dtype = delta.get("type")
        if dtype == "text_delta":
            text = str(delta.get("text", ""))
            cb["text"] = cb.get("text", "") + text
            await self.emit("text", text)
        elif dtype == "input_json_delta":
            cb["_json"] += str(delta.get("partial_json", ""))
        elif dtype == "thinking_delta":
            text = str(delta.get("thinking", ""))
            cb["thinking"] = cb.get("thinking", "") + text
            await self.emit("thinking", text)
        elif dtype == "signature_delta":
            cb["signature"] = cb.get("signature", "") + str(delta.get("signature", ""))

    def _usage(self, u: dict[str, Any]) -> None:
        for field in ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"):
            v = u.get(field)
            if isinstance(v, int):
                setattr(self.usage, field, v)

    def blocks(self) -> list[Block]:
        out: list[Block] = []
        for _, cb in sorted(self._blocks.items()):
            kind = cb.get("type")
            if kind == "text":
                out.append(TextBlock(str(cb.get("text", ""))))
            elif kind == "thinking":
                out.append(ThinkingBlock(str(cb.get("thinking", "")), cb.get("signature") or None, source="anthropic"))
            elif kind == "tool_use":
                raw = cb["_json"]
                if raw.strip():
                    try:
                        args = json.loads(raw)
                    except ValueError:
                        raise self.driver.malformed(self.req_model, f"tool input is not JSON: {raw[:200]!r}") from None
                else:
                    args = cb.get("input") or {}
                if not isinstance(args, dict):
                    raise self.driver.malformed(self.req_model, "tool input is not a JSON object")
                out.append(ToolUseBlock(str(cb["id"]), str(cb["name"]), args))
            # redacted_thinking and server-side tool blocks are not kept (treadle does not request them)
        return out
