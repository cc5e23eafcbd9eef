"""A fake Anthropic Messages API: `POST /v1/messages` with `stream: true`, answered with the event
sequence Anthropic documents (message_start, content_block_start/delta/stop with a ping, then
message_delta and message_stop), its error bodies and headers, and its request rules
(x-api-key, anthropic-version, alternating roles, every tool_use answered by a tool_result in
the next user turn, thinking blocks returned with the signature they were issued with)."""

from __future__ import annotations

import json
import re
from typing import Any

from tests.support.fake_http import Reply, Request
from tests.support.vendors.base import Fail, Turn, VendorFake, new_id, sse

MODELS = {"claude-sonnet-4-5", "claude-haiku-4-5", "claude-opus-4-1"}
ERRORS = {
    "rate_limit": (429, "rate_limit_error", "This request would exceed the rate limit for your organization of 50 "
                   "requests per minute. For details, refer to: https://docs.claude.com/en/api/rate-limits."),
    "server": (500, "api_error", "Internal server error"),
    "overloaded": (529, "overloaded_error", "Overloaded"),
    "auth": (401, "authentication_error", "invalid x-api-key"),
    "context": (400, "invalid_request_error", "prompt is too long: 208310 tokens > 200000 maximum"),
    "unknown_model": (404, "not_found_error", "model: claude-nonexistent"),
    "bad_request": (400, "invalid_request_error", "messages: text content blocks must be non-empty"),
}  # fmt: skip
ID_OK = re.compile(r"^[a-zA-Z0-9_-]+$")


class FakeAnthropic(VendorFake):
    name = "anthropic"

    def __init__(self, key: str = "sk-ant-api03-test-0123456789abcdef") -> None:
        super().__init__(key)
        self.signatures: dict[str, str] = {}  # signature → the thinking text it signs

    def route(self, req: Request) -> Reply | None:
        if req.method == "GET" and req.path == "/v1/models":  # one model per page: the client pages
            if not self.authorized(req):
                return self.auth_reply(req)
            after = (req.query.get("after_id") or [""])[0]
            rest = [m for m in sorted(MODELS) if m > after]
            return Reply.json(200, {"data": [{"type": "model", "id": m, "display_name": m,
                                              "created_at": "2025-01-01T00:00:00Z"} for m in rest[:1]],
                                    "has_more": len(rest) > 1, "first_id": rest[0] if rest else None,
                                    "last_id": rest[0] if rest else None})
        if req.method != "POST" or req.path != "/v1/messages":
            return Reply.json(404, {"type": "error", "error": {"type": "not_found_error", "message": "Not Found"}})
        return None

    def authorized(self, req: Request) -> bool:
        return req.headers.get("x-api-key") == self.key

    def stream_error(self) -> bytes:
        return sse("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})

    def model_ok(self, req: Request, body: Any) -> bool:
        return body.get("model") in MODELS

    def auth_reply(self, req: Request) -> Reply:
        return self.fail_reply(Fail("auth"), req)

    def bad_request(self, message: str) -> Reply:
        return _error(400, "invalid_request_error", message)

    def fail_reply(self, fail: Fail, req: Request) -> Reply:
        status, etype, message = ERRORS[fail.kind]
        headers = {"retry-after": fail.retry_after} if fail.retry_after else {}
        return _error(status, etype, message, headers)

    def validate(self, req: Request, body: Any) -> list[str]:
        p: list[str] = []
        if req.headers.get("anthropic-version") != "2023-06-01":
            p.append("anthropic-version: header is required")
        if not isinstance(body, dict) or body.get("stream") is not True:
            return [*p, "stream: must be true in these tests"]
        if not isinstance(body.get("max_tokens"), int):
            p.append("max_tokens: Field required")
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs:
            return [*p, "messages: at least one message is required"]
        if msgs[0].get("role") != "user":
            p.append("messages: first message must use the user role")
        for i, m in enumerate(msgs):
            if i and msgs[i - 1]["role"] == m["role"]:
                p.append(f"messages.{i}: roles must alternate between user and assistant")
            content = m.get("content")
            if not isinstance(content, list) or not content:
                p.append(f"messages.{i}.content: must be a non-empty list")
                continue
            for j, b in enumerate(content):
                p += _check_block(self, f"messages.{i}.content.{j}", m["role"], b)
            uses = [b["id"] for b in content if b.get("type") == "tool_use"]
            if uses:
                nxt = msgs[i + 1]["content"] if i + 1 < len(msgs) else []
                answered = [b.get("tool_use_id") for b in nxt if b.get("type") == "tool_result"]
                if sorted(answered) != sorted(uses):
                    p.append(f"messages.{i + 1}: tool_use ids {uses} were found without tool_result blocks")
                lead = [b.get("type") for b in nxt[: len(answered)]]
                if any(t != "tool_result" for t in lead):
                    p.append(f"messages.{i + 1}: tool_result blocks must come first")
            results = [b.get("tool_use_id") for b in content if b.get("type") == "tool_result"]
            prev = [b.get("id") for b in msgs[i - 1]["content"] if b.get("type") == "tool_use"] if i else []
            for r in results:
                if r not in prev:
                    p.append(f"messages.{i}: unexpected tool_use_id {r} in tool_result blocks")
        if body.get("thinking"):
            for m in reversed(msgs):
                if m["role"] == "assistant" and any(b.get("type") == "tool_use" for b in m["content"]):
                    if m["content"][0].get("type") not in ("thinking", "redacted_thinking"):
                        p.append("Expected `thinking` or `redacted_thinking`, but found `tool_use`")
                    break
        marks = [b for b in [*(body.get("system") or []), *(body.get("tools") or []),
                             *(b for m in msgs for b in m.get("content") or [])] if b.get("cache_control")]
        if len(marks) > 4:
            p.append(f"A maximum of 4 blocks with cache_control may be provided. Found {len(marks)}.")
        if any(b.get("type") in ("thinking", "redacted_thinking") for b in marks):
            p.append("messages: cache_control cannot be set on thinking blocks")
        if any(b.get("cache_control") != {"type": "ephemeral"} for b in marks):
            p.append("cache_control: type must be 'ephemeral'")
        for t in body.get("tools") or []:
            if not t.get("name") or not isinstance(t.get("input_schema"), dict):
                p.append("tools: name and input_schema are required")
        system = body.get("system")
        if system is not None and not (isinstance(system, list) and all(s.get("type") == "text" for s in system)):
            p.append("system: a list of text blocks is expected")
        return p

    def turn_reply(self, turn: Turn, body: Any, req: Request) -> Reply:
        model = body["model"]
        events: list[bytes] = [
            sse("message_start", {
                "type": "message_start",
                "message": {"id": new_id("msg_01"), "type": "message", "role": "assistant", "model": model,
                            "content": [], "stop_reason": None, "stop_sequence": None,
                            "usage": {"input_tokens": 25, "cache_creation_input_tokens": 5,
                                      "cache_read_input_tokens": 10, "output_tokens": 1}},
            })
        ]  # fmt: skip
        index = 0
        if turn.thinking is not None:
            sig = "EqQBCkgIARABGAIiQL" + new_id("", 24)
            self.signatures[sig] = turn.thinking
            events += [
                sse("content_block_start", {"type": "content_block_start", "index": index,
                                            "content_block": {"type": "thinking", "thinking": ""}}),
                sse("content_block_delta", {"type": "content_block_delta", "index": index,
                                            "delta": {"type": "thinking_delta", "thinking": turn.thinking}}),
                sse("content_block_delta", {"type": "content_block_delta", "index": index,
                                            "delta": {"type": "signature_delta", "signature": sig}}),
                sse("content_block_stop", {"type": "content_block_stop", "index": index}),
            ]  # fmt: skip
            index += 1
        if turn.text:
            events.append(sse("content_block_start", {"type": "content_block_start", "index": index,
                                                      "content_block": {"type": "text", "text": ""}}))  # fmt: skip
            events.append(sse("ping", {"type": "ping"}))
            for piece in turn.text:
                events.append(sse("content_block_delta", {"type": "content_block_delta", "index": index,
                                                          "delta": {"type": "text_delta", "text": piece}}))  # fmt: skip
            events.append(sse("content_block_stop", {"type": "content_block_stop", "index": index}))
            index += 1
        for call in turn.tools:
            tid = call.id or new_id("toolu_01", 11)
            raw = json.dumps(call.input)
            events.append(sse("content_block_start", {
                "type": "content_block_start", "index": index,
                "content_block": {"type": "tool_use", "id": tid, "name": call.name, "input": {}},
            }))  # fmt: skip
            for piece in ["", raw[: len(raw) // 2], raw[len(raw) // 2 :]]:
                delta = {"type": "input_json_delta", "partial_json": piece}
                block = {"type": "content_block_delta", "index": index, "delta": delta}
                events.append(sse("content_block_delta", block))
            events.append(sse("content_block_stop", {"type": "content_block_stop", "index": index}))
            index += 1
        stop = turn.stop or ("tool_use" if turn.tools else "end_turn")
        events += [
            sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                  "usage": {"output_tokens": 15}}),
            sse("message_stop", {"type": "message_stop"}),
        ]  # fmt: skip
        return self.stream_reply(events, turn, {"request-id": new_id("req_011C"), "anthropic-organization-id": "org"})

    # -- inspection ---------------------------------------------------------------------------------

    @staticmethod
    def tool_results(body: dict[str, Any]) -> list[tuple[str, str, bool]]:
        """(tool_use_id, content, is_error) of the last user message's tool_result blocks."""
        last = body["messages"][-1]
        return [(b["tool_use_id"], b["content"], bool(b.get("is_error"))) for b in last["content"]
                if b.get("type") == "tool_result"]  # fmt: skip

    @staticmethod
    def tool_uses(body: dict[str, Any]) -> list[str]:
        """Ids of the tool_use blocks of the last assistant message."""
        for m in reversed(body["messages"]):
            if m["role"] == "assistant":
                return [b["id"] for b in m["content"] if b.get("type") == "tool_use"]
        return []


def _check_block(fake: FakeAnthropic, where: str, role: str, b: dict[str, Any]) -> list[str]:
    kind = b.get("type")
    if kind == "text":
        return [] if b.get("text") else [f"{where}: text content blocks must be non-empty"]
    if kind == "tool_use":
        ok = role == "assistant" and ID_OK.match(str(b.get("id", ""))) is not None and isinstance(b.get("input"), dict)
        return [] if ok else [f"{where}: invalid tool_use block"]
    if kind == "tool_result":
        ok = role == "user" and ID_OK.match(str(b.get("tool_use_id", ""))) is not None
        return [] if ok else [f"{where}: invalid tool_result block"]
    if kind == "thinking":
        sig = b.get("signature")
        if role != "assistant" or sig not in fake.signatures or fake.signatures[sig] != b.get("thinking"):
            return [f"{where}: Invalid `signature` in `thinking` block"]
        return []
    if kind == "image":
        return []
    return [f"{where}: unknown block type {kind!r}"]


def _error(status: int, etype: str, message: str, headers: dict[str, str] | None = None) -> Reply:
    request_id = new_id("req_011C")
    doc = {"type": "error", "error": {"type": etype, "message": message}, "request_id": request_id}
    return Reply.json(status, doc, {"request-id": request_id, **(headers or {})})
