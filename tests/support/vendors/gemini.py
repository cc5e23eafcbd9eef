"""A fake Gemini API: `POST /v1beta/models/{model}:streamGenerateContent?alt=sse` with
`x-goog-api-key`, answered by `data: <GenerateContentResponse>` frames separated by CRLF blank
lines (text split across frames, function calls whole, `finishReason` and `usageMetadata` on the
last), Google's error envelope (`API_KEY_INVALID` as a 400, RetryInfo on 429), and Gemini's
request rules: roles user/model, function responses answering the previous turn's calls by name,
the OpenAPI schema subset in functionDeclarations, and thought signatures sent back on the
function-call part they came with."""

from __future__ import annotations

import json
from typing import Any

from tests.support.fake_http import Reply, Request
from tests.support.vendors.base import Fail, Turn, VendorFake, new_id

MODELS = {"gemini-2.5-flash", "gemini-2.5-pro", "gemini-3-pro-preview"}
SCHEMA_KEYS = {"type", "format", "description", "nullable", "enum", "properties", "required", "items", "minItems",
               "maxItems", "minimum", "maximum", "minLength", "maxLength", "pattern", "title"}  # fmt: skip
TYPES = {"string", "number", "integer", "boolean", "array", "object"}
ERRORS = {
    "rate_limit": (429, "RESOURCE_EXHAUSTED",
                   "You exceeded your current quota, please check your plan and billing details."),
    "server": (500, "INTERNAL", "An internal error has occurred. Please retry or report in "
               "https://developers.generativeai.google/guide/troubleshooting"),
    "overloaded": (503, "UNAVAILABLE", "The model is overloaded. Please try again later."),
    "context": (400, "INVALID_ARGUMENT",
                "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576)."),
    "unknown_model": (404, "NOT_FOUND", "models/gemini-nonexistent is not found for API version v1beta, or is not "
                      "supported for generateContent. Call ListModels to see the list of available models."),
    "bad_request": (400, "INVALID_ARGUMENT", "Request contains an invalid argument."),
}  # fmt: skip


class FakeGemini(VendorFake):
    name = "gemini"

    def __init__(self, key: str = "AIzaSyTEST0123456789abcdefghijklmnopq") -> None:
        super().__init__(key)
        self.signed: dict[str, str] = {}  # first functionCall of a signed turn (JSON) → its signature

    def model_of(self, req: Request) -> str:
        return req.path.removeprefix("/v1beta/models/").removesuffix(":streamGenerateContent")

    def route(self, req: Request) -> Reply | None:
        if req.method == "GET" and req.path == "/v1beta/models":
            if not self.authorized(req):
                return self.auth_reply(req)
            return Reply.json(200, {"models": [{"name": f"models/{m}", "displayName": m} for m in sorted(MODELS)]})
        if req.method == "POST" and req.path.startswith("/v1beta/models/") and req.path.endswith(
            ":streamGenerateContent"
        ):
            if req.query.get("alt") != ["sse"]:
                return self.bad_request("these tests expect alt=sse")
            return None
        return _error(404, "NOT_FOUND", f"Method not found: {req.path}")

    def authorized(self, req: Request) -> bool:
        return req.headers.get("x-goog-api-key") == self.key and "key" not in req.query

    def stream_error(self) -> bytes:
        doc = {"error": {"code": 503, "message": "The model is overloaded. Please try again later.",
                         "status": "UNAVAILABLE"}}  # fmt: skip
        return f"data: {json.dumps(doc)}\r\n\r\n".encode()

    def model_ok(self, req: Request, body: Any) -> bool:
        return self.model_of(req) in MODELS

    def auth_reply(self, req: Request) -> Reply:
        details: list[dict[str, Any]] = [
            {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID",
             "domain": "googleapis.com", "metadata": {"service": "generativelanguage.googleapis.com"}},
            {"@type": "type.googleapis.com/google.rpc.LocalizedMessage", "locale": "en-US",
             "message": "API key not valid. Please pass a valid API key."}]  # fmt: skip
        return _error(400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.", details=details)

    def bad_request(self, message: str) -> Reply:
        return _error(400, "INVALID_ARGUMENT", message)

    def fail_reply(self, fail: Fail, req: Request) -> Reply:
        if fail.kind == "auth":
            return self.auth_reply(req)
        status, gstatus, message = ERRORS[fail.kind]
        details: list[dict[str, Any]] = []
        if fail.kind == "rate_limit":
            details.append({"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [
                {"quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
                 "quotaId": "GenerateRequestsPerMinutePerProjectPerModel-FreeTier"}]})  # fmt: skip
            if fail.retry_after:
                details.append({"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": fail.retry_after})
        return _error(status, gstatus, message, details=details)

    def validate(self, req: Request, body: Any) -> list[str]:
        p: list[str] = []
        contents = body.get("contents") if isinstance(body, dict) else None
        if not isinstance(contents, list) or not contents:
            return ["* GenerateContentRequest.contents: contents is not specified"]
        prev_calls: list[str] = []
        for i, c in enumerate(contents):
            role, parts = c.get("role"), c.get("parts")
            if role not in ("user", "model"):
                p.append(f"contents[{i}].role: Please use a valid role: user, model.")
            if not isinstance(parts, list) or not parts:
                p.append(f"* GenerateContentRequest.contents[{i}].parts: contents.parts must not be empty.")
                continue
            responses = [x["functionResponse"]["name"] for x in parts if "functionResponse" in x]
            if responses and sorted(responses) != sorted(prev_calls):
                p.append("Please ensure that the number of function response parts is equal to the number of "
                         "function call parts of the function call turn.")  # fmt: skip
            for x in parts:
                if "functionResponse" in x and not isinstance(x["functionResponse"].get("response"), dict):
                    p.append(f"contents[{i}]: functionResponse.response must be an object")
            calls = [x for x in parts if "functionCall" in x]
            if calls and role != "model":
                p.append(f"contents[{i}]: functionCall parts belong to the model role")
            if calls:
                want = self.signed.get(json.dumps(calls[0]["functionCall"], sort_keys=True))
                if want is not None and calls[0].get("thoughtSignature") != want:
                    p.append(f"Function call `{calls[0]['functionCall']['name']}` in the `{i + 1}.` content block is "
                             "missing a `thought_signature`.")  # fmt: skip
            prev_calls = [x["functionCall"]["name"] for x in calls]
        for t in body.get("tools") or []:
            for d in t.get("functionDeclarations") or []:
                if "parameters" in d:
                    p += check_schema(d["parameters"], f"tools.function_declarations[{d.get('name')}].parameters")
        system = body.get("systemInstruction")
        if system is not None and not (system.get("parts") and "text" in system["parts"][0]):
            p.append("systemInstruction: parts with text are expected")
        return p

    def turn_reply(self, turn: Turn, body: Any, req: Request) -> Reply:
        model = self.model_of(req)
        frames: list[dict[str, Any]] = []

        def frame(parts: list[dict[str, Any]], finish: str | None = None, usage: bool = False) -> None:
            cand: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
            if finish:
                cand["finishReason"] = finish
            doc: dict[str, Any] = {"candidates": [cand], "modelVersion": model, "responseId": new_id("", 8)}
            doc["usageMetadata"] = {"promptTokenCount": 30, "candidatesTokenCount": 12 if usage else 2,
                                    "totalTokenCount": 42 if usage else 32, "cachedContentTokenCount": 10,
                                    "thoughtsTokenCount": 4 if usage else 0}  # fmt: skip
            frames.append(doc)

        if turn.thinking is not None:
            frame([{"text": turn.thinking, "thought": True}])
        for piece in turn.text:
            frame([{"text": piece}])
        calls: list[dict[str, Any]] = [{"functionCall": {"name": c.name, "args": c.input}} for c in turn.tools]
        if calls and turn.signature:
            sig = new_id("CiQB", 20)
            calls[0]["thoughtSignature"] = sig
            self.signed[json.dumps(calls[0]["functionCall"], sort_keys=True)] = sig
        finish = turn.stop or "STOP"
        if calls:
            frame(calls, finish, usage=True)
        elif frames:
            frames[-1]["candidates"][0]["finishReason"] = finish
            frames[-1]["usageMetadata"].update(candidatesTokenCount=12, totalTokenCount=42, thoughtsTokenCount=4)
        else:
            frame([{"text": ""}], finish, usage=True)
        events = [f"data: {json.dumps(f, separators=(',', ':'))}\r\n\r\n".encode() for f in frames]
        headers = {"x-goog-request-id": new_id(""), "server": "scaffolding on HTTPServer2"}
        return self.stream_reply(events, turn, headers)

    # -- inspection ---------------------------------------------------------------------------------

    @staticmethod
    def tool_results(body: dict[str, Any]) -> list[tuple[str, str, bool]]:
        last = body["contents"][-1]
        out = []
        for x in last["parts"]:
            if "functionResponse" in x:
                r = x["functionResponse"]["response"]
                out.append((x["functionResponse"]["name"], r.get("output", r.get("error", "")), "error" in r))
        return out

    @staticmethod
    def tool_uses(body: dict[str, Any]) -> list[str]:
        for c in reversed(body["contents"]):
            if c["role"] == "model":
                return [x["functionCall"]["name"] for x in c["parts"] if "functionCall" in x]
        return []


def check_schema(s: Any, where: str) -> list[str]:
    if not isinstance(s, dict):
        return [f"{where}: schema must be an object"]
    p = [f'Invalid JSON payload received. Unknown name "{k}" at \'{where}\': Cannot find field.'
         for k in s if k not in SCHEMA_KEYS]  # fmt: skip
    if s.get("type") not in TYPES:
        p.append(f"{where}.type: must be specified (one of {sorted(TYPES)}), got {s.get('type')!r}")
    if "enum" in s and not all(isinstance(v, str) for v in s["enum"]):
        p.append(f"{where}.enum: only string values are allowed")
    for k, v in (s.get("properties") or {}).items():
        p += check_schema(v, f"{where}.properties[{k}]")
    if "items" in s:
        p += check_schema(s["items"], f"{where}.items")
    for r in s.get("required") or []:
        if r not in (s.get("properties") or {}):
            p.append(f"{where}.required[{r}]: property is not defined")
    return p


def _error(status: int, gstatus: str, message: str, details: list[dict[str, Any]] | None = None) -> Reply:
    doc: dict[str, Any] = {"error": {"code": status, "message": message, "status": gstatus}}
    if details:
        doc["error"]["details"] = details
    return Reply.json(status, doc)
