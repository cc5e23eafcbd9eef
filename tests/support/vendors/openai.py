"""A fake OpenAI Chat Completions API, with the DeepSeek and Ollama variations.

OpenAI: `POST /v1/chat/completions`, `Authorization: Bearer`, streamed `chat.completion.chunk`s
(role chunk, content deltas, tool_calls fragments by index with the arguments split across
chunks, a finish chunk, the `include_usage` chunk with `choices: []`, then `data: [DONE]`), its
error envelope `{"error": {message, type, param, code}}`, and its request rules (every tool_call
answered by a `tool` message before the next turn).

DeepSeek (`/chat/completions`): streams `reasoning_content`; a later request must send the
`reasoning_content` back on an assistant turn that called tools, and `content` on tool messages
must be a string. Ollama (`/v1/chat/completions` at the root, no key needed locally): streams
`reasoning`, answers `POST /api/show` with the model's parameters and context length.
"""

from __future__ import annotations

import json
import time
from typing import Any

from tests.support.fake_http import Reply, Request
from tests.support.vendors.base import Fail, Turn, VendorFake, new_id, sse

ERRORS = {
    "rate_limit": (429, "requests", "rate_limit_exceeded",
                   "Rate limit reached for gpt-4o-mini in organization org-test on requests per min (RPM): "
                   "Limit 3, Used 3, Requested 1. Please try again in 20s."),
    "server": (500, "server_error", None, "The server had an error while processing your request. Sorry about that!"),
    "overloaded": (503, "server_error", None, "The engine is currently overloaded, please try again later"),
    "context": (400, "invalid_request_error", "context_length_exceeded",
                "This model's maximum context length is 128000 tokens. However, your messages resulted in 130412 "
                "tokens. Please reduce the length of the messages."),
    "unknown_model": (404, "invalid_request_error", "model_not_found",
                      "The model `gpt-nonexistent` does not exist or you do not have access to it."),
    "bad_request": (400, "invalid_request_error", None, "Invalid value for 'content': expected a string, got null."),
}  # fmt: skip


class FakeOpenAI(VendorFake):
    name = "openai"
    chat_path = "/v1/chat/completions"
    models = {"gpt-4o-mini", "gpt-4.1"}
    reasoning_field: str | None = None
    needs_key = True

    def __init__(self, key: str = "sk-proj-test0123456789abcdefTESTKEY") -> None:
        super().__init__(key)
        self.reasoning_for: dict[str, str] = {}  # tool_call id → reasoning it was issued with

    def route(self, req: Request) -> Reply | None:
        if req.method == "POST" and req.path == self.chat_path:
            return None
        if req.method == "GET" and req.path == self.chat_path.replace("/chat/completions", "/models"):
            if not self.authorized(req):
                return self.auth_reply(req)
            listed = [{"id": m, "object": "model", "created": 1700000000, "owned_by": self.name}
                      for m in sorted(self.models)]
            return Reply.json(200, {"object": "list", "data": listed})
        return _error(404, "invalid_request_error", "unknown_url", f"Unknown request URL: {req.method} {req.path}")

    def authorized(self, req: Request) -> bool:
        if not self.needs_key:
            return True
        return req.headers.get("authorization") == f"Bearer {self.key}"

    def stream_error(self) -> bytes:
        return sse(None, {"error": {"message": "The server had an error while processing your request.",
                                    "type": "server_error", "param": None, "code": None}})  # fmt: skip

    def model_ok(self, req: Request, body: Any) -> bool:
        return body.get("model") in self.models

    def auth_reply(self, req: Request) -> Reply:
        given = req.headers.get("authorization", "").removeprefix("Bearer ")
        if not given:
            message = ("You didn't provide an API key. You need to provide your API key in an Authorization header "
                       "using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).")  # fmt: skip
            code = None
        else:
            masked = given[:3] + "*" * 16 + given[-4:]
            message = (f"Incorrect API key provided: {masked}. You can find your API key at "
                       "https://platform.openai.com/account/api-keys.")  # fmt: skip
            code = "invalid_api_key"
        return _error(401, "invalid_request_error", code, message)

    def bad_request(self, message: str) -> Reply:
        return _error(400, "invalid_request_error", None, message)

    def fail_reply(self, fail: Fail, req: Request) -> Reply:
        if fail.kind == "auth":
            return self.auth_reply(Request(req.method, req.target, {"authorization": "Bearer sk-wrong000000"}, b""))
        status, etype, code, message = ERRORS[fail.kind]
        headers = {"retry-after": fail.retry_after, "x-ratelimit-remaining-requests": "0"} if fail.retry_after else {}
        return _error(status, etype, code, message, headers)

    def validate(self, req: Request, body: Any) -> list[str]:
        p: list[str] = []
        if not isinstance(body, dict) or body.get("stream") is not True:
            return ["stream: must be true in these tests"]
        if (body.get("stream_options") or {}).get("include_usage") is not True:
            p.append("stream_options.include_usage: expected true")
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs:
            return [*p, "messages: must be a non-empty array"]
        open_calls: list[str] = []
        for i, m in enumerate(msgs):
            role = m.get("role")
            if role == "tool":
                if m.get("tool_call_id") not in open_calls:
                    p.append(f"messages[{i}]: messages with role 'tool' must be a response to a preceeding message "
                             "with 'tool_calls'")  # fmt: skip
                else:
                    open_calls.remove(m["tool_call_id"])
                if not isinstance(m.get("content"), str):
                    p.append(f"messages[{i}].content: tool message content must be a string")
                continue
            if open_calls:
                p.append(f"An assistant message with 'tool_calls' must be followed by tool messages responding to "
                         f"each 'tool_call_id'. The following tool_call_ids did not have response messages: "
                         f"{', '.join(open_calls)}")  # fmt: skip
                open_calls = []
            if role not in ("system", "user", "assistant", "developer"):
                p.append(f"messages[{i}].role: invalid {role!r}")
            if role == "assistant":
                p += self.check_assistant(i, m)
                for tc in m.get("tool_calls") or []:
                    args = (tc.get("function") or {}).get("arguments")
                    if tc.get("type") != "function" or not isinstance(args, str) or not _is_json(args):
                        p.append(f"messages[{i}].tool_calls: invalid tool call")
                    open_calls.append(tc.get("id"))
            elif m.get("content") in (None, ""):
                p.append(f"messages[{i}].content: must not be empty")
        if open_calls:
            p.append("tool_calls without responses at the end of messages")
        for t in body.get("tools") or []:
            if t.get("type") != "function" or "name" not in t.get("function", {}):
                p.append("tools: each tool must be {type: function, function: {name, ...}}")
        return p

    def check_assistant(self, i: int, m: dict[str, Any]) -> list[str]:
        if "reasoning_content" in m:
            return [f"messages[{i}]: unknown field reasoning_content"]
        if m.get("content") is None and not m.get("tool_calls"):
            return [f"messages[{i}].content: assistant content is required unless tool_calls is given"]
        return []

    def turn_reply(self, turn: Turn, body: Any, req: Request) -> Reply:
        model = body.get("model")
        cid, created = new_id("chatcmpl-", 14), int(time.time())

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            return sse(None, {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                              "system_fingerprint": "fp_test", "choices": [{"index": 0, "delta": delta,
                              "logprobs": None, "finish_reason": finish}]})  # fmt: skip

        events = [chunk({"role": "assistant", "content": "", "refusal": None})]
        if turn.thinking is not None and self.reasoning_field:
            half = len(turn.thinking) // 2
            for piece in (turn.thinking[:half], turn.thinking[half:]):
                events.append(chunk({self.reasoning_field: piece}))
        for piece in turn.text:
            events.append(chunk({"content": piece}))
        for n, call in enumerate(turn.tools):
            tid = call.id or new_id("call_", 12)
            if turn.thinking is not None:
                self.reasoning_for[tid] = turn.thinking
            raw = json.dumps(call.input)
            events.append(chunk({"tool_calls": [{"index": n, "id": tid, "type": "function",
                                                 "function": {"name": call.name, "arguments": ""}}]}))  # fmt: skip
            for piece in (raw[:5], raw[5:]):
                events.append(chunk({"tool_calls": [{"index": n, "function": {"arguments": piece}}]}))
        finish = turn.stop or ("tool_calls" if turn.tools else "stop")
        events.append(chunk({}, finish))
        events.append(sse(None, {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                                 "system_fingerprint": "fp_test", "choices": [], "usage": self.usage()}))  # fmt: skip
        events.append(b"data: [DONE]\n\n")
        return self.stream_reply(events, turn, {"x-request-id": new_id("req_"), "openai-processing-ms": "12"})

    def usage(self) -> dict[str, Any]:
        return {"prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42,
                "prompt_tokens_details": {"cached_tokens": 10, "audio_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 0}}  # fmt: skip

    # -- inspection ---------------------------------------------------------------------------------

    @staticmethod
    def tool_results(body: dict[str, Any]) -> list[tuple[str, str, bool]]:
        out = []
        for m in reversed(body["messages"]):
            if m["role"] != "tool":
                break
            out.append((m["tool_call_id"], m["content"], m["content"].startswith("[tool error]")))
        return out[::-1]

    @staticmethod
    def tool_uses(body: dict[str, Any]) -> list[str]:
        for m in reversed(body["messages"]):
            if m["role"] == "assistant":
                return [tc["id"] for tc in m.get("tool_calls") or []]
        return []


class FakeDeepSeek(FakeOpenAI):
    name = "deepseek"
    chat_path = "/chat/completions"
    models = {"deepseek-chat", "deepseek-reasoner"}
    reasoning_field = "reasoning_content"

    def __init__(self, key: str = "sk-0123456789abcdef0123456789abcdef") -> None:
        super().__init__(key)

    def check_assistant(self, i: int, m: dict[str, Any]) -> list[str]:
        p = []
        if not isinstance(m.get("content"), str):
            p.append(f"messages[{i}].content: content must be a string")
        for tc in m.get("tool_calls") or []:
            want = self.reasoning_for.get(tc["id"])
            if want is not None and m.get("reasoning_content") != want:
                p.append(f"messages[{i}]: The reasoning_content in the thinking mode must be passed back to the API.")
                break
        return p

    def usage(self) -> dict[str, Any]:
        return {"prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42, "prompt_cache_hit_tokens": 10,
                "prompt_cache_miss_tokens": 20, "completion_tokens_details": {"reasoning_tokens": 5}}  # fmt: skip


class FakeOllama(FakeOpenAI):
    name = "ollama"
    models = {"qwen3:8b", "gpt-oss:20b"}
    reasoning_field = "reasoning"
    needs_key = False

    def __init__(
        self, key: str = "", context_length: int = 40960, num_ctx: int | None = 8192, cloud: bool = False
    ) -> None:
        super().__init__(key)
        self.needs_key = cloud  # ollama.com wants `Authorization: Bearer $OLLAMA_API_KEY`
        self.context_length = context_length
        self.num_ctx = num_ctx
        self.shows: list[str] = []

    def route(self, req: Request) -> Reply | None:
        if req.method == "POST" and req.path == "/api/show":
            if not self.authorized(req):
                return Reply.json(401, {"error": "unauthorized"})
            model = req.json().get("model")
            self.shows.append(model)
            if model not in self.models:
                return Reply.json(404, {"error": f"model '{model}' not found"})
            params = "stop                           \"<|im_end|>\"\ntemperature                    0.6"
            if self.num_ctx:
                params += f"\nnum_ctx                        {self.num_ctx}"
            return Reply.json(200, {
                "license": "Apache 2.0", "modelfile": "# Modelfile", "parameters": params, "template": "{{ .Prompt }}",
                "details": {"parent_model": "", "format": "gguf", "family": "qwen3", "families": ["qwen3"],
                            "parameter_size": "8.2B", "quantization_level": "Q4_K_M"},
                "model_info": {"general.architecture": "qwen3", "general.parameter_count": 8190735360,
                               "qwen3.context_length": self.context_length, "qwen3.embedding_length": 4096},
                "capabilities": ["completion", "tools", "thinking"],
            })  # fmt: skip
        return super().route(req)

    def fail_reply(self, fail: Fail, req: Request) -> Reply:
        if fail.kind == "unknown_model":
            return Reply.json(404, {"error": {"message": "model \"qwen9\" not found, try pulling it first",
                                              "type": "api_error", "param": None, "code": None}})  # fmt: skip
        return super().fail_reply(fail, req)

    def usage(self) -> dict[str, Any]:
        return {"prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42}


def _error(status: int, etype: str, code: str | None, message: str, headers: dict[str, str] | None = None) -> Reply:
    return Reply.json(status, {"error": {"message": message, "type": etype, "param": None, "code": code}}, headers)


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True
