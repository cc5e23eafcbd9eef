"""Gemini `models/{model}:streamGenerateContent?alt=sse` (the generateContent request, streamed).

Wire facts this driver relies on:
- header `x-goog-api-key` (never the `?key=` query parameter: URLs end up in logs);
- request `{contents: [{role: user|model, parts: [...]}], systemInstruction, tools:
  [{functionDeclarations: [...]}], generationConfig}`; parts are `text`, `inlineData`,
  `functionCall {name, args}`, `functionResponse {name, response}`;
- every SSE `data:` is a whole GenerateContentResponse: `candidates[0].content.parts`, and on the
  last one `finishReason`; `usageMetadata` (promptTokenCount, candidatesTokenCount,
  cachedContentTokenCount, thoughtsTokenCount); there is no `[DONE]` — a stream that ends
  without a finishReason was cut;
- function calls arrive whole (not as deltas) and are answered by name, in order; a
  `thoughtSignature` on a part must be sent back on the same kind of part next turn (for
  parallel calls it rides on the first functionCall);
- errors are `{"error": {"code", "message", "status", "details": [...]}}`; an invalid key is a
  400 `INVALID_ARGUMENT` whose ErrorInfo reason is `API_KEY_INVALID`; a 429 carries RetryInfo
  `retryDelay: "37s"`.

Options: `temperature`, `thinking_budget`, `include_thoughts`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
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
from treadle.providers.base import DeltaSink, ModelRequest, ModelResponse, Usage
from treadle.providers.gemini_schema import to_gemini_schema
from treadle.providers.http import HttpDriver, StreamAssembly, VendorError, json_or_none

FINISH = {"STOP": "end_turn", "MAX_TOKENS": "max_tokens"}
REFUSALS = {"SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY"}


class GeminiProvider(HttpDriver):
    driver = "gemini"
    reasoning_format = "gemini"

    def build_body(self, req: ModelRequest) -> dict[str, Any]:
        body: dict[str, Any] = {"contents": encode_contents(req.messages)}
        if req.system:
            body["systemInstruction"] = {"parts": [{"text": req.system}]}
        if req.tools:
            decls = []
            for t in req.tools:
                decl: dict[str, Any] = {"name": t.name, "description": t.description}
                params = to_gemini_schema(t.input_schema)
                if params.get("properties"):
                    decl["parameters"] = params
                decls.append(decl)
            body["tools"] = [{"functionDeclarations": decls}]
        gen: dict[str, Any] = {"maxOutputTokens": req.max_tokens}
        opts = req.options
        if "temperature" in opts:
            gen["temperature"] = opts["temperature"]
        for opt, key in (("top_p", "topP"), ("top_k", "topK"), ("seed", "seed"), ("stop", "stopSequences"),
                         ("presence_penalty", "presencePenalty"), ("frequency_penalty", "frequencyPenalty")):
            if opt in opts:  # a run's loomcycle `sampling` (engine/step.py)
                gen[key] = opts[opt]
        thinking: dict[str, Any] = {}
        if isinstance(opts.get("thinking_budget"), int):
            thinking["thinkingBudget"] = opts["thinking_budget"]
        elif opts.get("effort") in ("low", "medium", "high"):  # loomcycle's effort mapping
            thinking["thinkingBudget"] = gemini_effort_budget(str(opts["effort"]), req.max_tokens)
        if opts.get("include_thoughts"):
            thinking["includeThoughts"] = True
        if thinking:
            gen["thinkingConfig"] = thinking
        body["generationConfig"] = gen
        return body

    async def call(self, req: ModelRequest, on_delta: DeltaSink | None = None) -> ModelResponse:
        key = self.require_key(req.model)
        model = req.model.removeprefix("models/")
        url = f"{self.endpoint.base_url}/v1beta/models/{quote(model, safe='')}:streamGenerateContent?alt=sse"
        headers = {"content-type": "application/json", "accept": "text/event-stream", "x-goog-api-key": key or ""}
        state = _Stream(self, req, on_delta)
        await self.stream(url, headers, self.build_body(req), state, model=req.model)
        content = state.blocks()
        stop = FINISH.get(state.finish_reason or "STOP", "refusal" if state.finish_reason in REFUSALS else "end_turn")
        if any(isinstance(b, ToolUseBlock) for b in content):
            stop = "tool_use"
        return state.response(content, stop, model=model)

    async def list_models(self, timeout_s: float = 10.0) -> list[str]:
        """`GET /v1beta/models`, page after page (`nextPageToken`; at most 10 pages), without `models/`."""
        headers = {"x-goog-api-key": self.api_key() or "", "accept": "application/json"}
        out: list[str] = []
        url = f"{self.endpoint.base_url}/v1beta/models?pageSize=1000"
        for _ in range(10):
            doc = await self.get_json(url, headers, timeout_s)
            out += self.listed(doc, "models", "name", "models/")
            token = doc.get("nextPageToken")
            if not isinstance(token, str) or not token:
                break
            url = f"{self.endpoint.base_url}/v1beta/models?pageSize=1000&pageToken={quote(token, safe='')}"
        return out

    def parse_error(self, status: int, body: bytes) -> VendorError:
        doc = json_or_none(body)
        if isinstance(doc, list) and doc and isinstance(doc[0], dict):  # the JSON-array framing of errors
            doc = doc[0]
        return _vendor_error(doc, body.decode("utf-8", "replace"), status)


def _vendor_error(doc: Any, raw: str, status: int | None) -> VendorError:
    err = doc.get("error") if isinstance(doc, dict) else None
    if not isinstance(err, dict):
        return VendorError(raw[:500] or f"HTTP {status}")
    msg = str(err.get("message") or "")
    gstatus = str(err.get("status") or "") or None
    reasons: set[str] = set()
    retry_after: float | None = None
    for d in err.get("details") or []:
        if not isinstance(d, dict):
            continue
        if d.get("reason"):
            reasons.add(str(d["reason"]))
        delay = d.get("retryDelay")
        if isinstance(delay, str) and delay.endswith("s"):
            with contextlib.suppress(ValueError):
                retry_after = float(delay[:-1])
    low = msg.lower()
    return VendorError(
        msg or (gstatus or "error"),
        code=gstatus,
        auth=bool(reasons & {"API_KEY_INVALID", "API_KEY_SERVICE_BLOCKED", "API_KEY_HTTP_REFERRER_BLOCKED"})
        or gstatus in ("UNAUTHENTICATED", "PERMISSION_DENIED"),
        context_exceeded="token count" in low and "exceeds" in low,
        unknown_model=gstatus == "NOT_FOUND",
        retryable=gstatus in ("UNAVAILABLE", "INTERNAL", "RESOURCE_EXHAUSTED", "DEADLINE_EXCEEDED"),
        retry_after_s=retry_after,
    )


def encode_contents(messages: list[Message]) -> list[dict[str, Any]]:
    names: dict[str, str] = {}  # tool_use id → function name (functionResponse answers by name)
    out: list[dict[str, Any]] = []
    for m in messages:
        parts: list[dict[str, Any]] = []
        if m.role == "assistant":
            signatures = [
                b.signature for b in m.content if isinstance(b, ThinkingBlock) and b.signature and b.source == "gemini"
            ]
            for b in m.content:
                if isinstance(b, TextBlock) and b.text:
                    parts.append({"text": b.text})
                elif isinstance(b, ToolUseBlock):
                    names[b.id] = b.name
                    parts.append({"functionCall": {"name": b.name, "args": b.input}})
            calls = [p for p in parts if "functionCall" in p]
            targets = calls or parts[-1:]
            for part, sig in zip(targets, signatures, strict=False):
                part["thoughtSignature"] = sig
            role = "model"
        else:
            for b in m.content:
                if isinstance(b, ToolResultBlock):
                    key = "error" if b.is_error else "output"
                    name = names.get(b.tool_use_id, "unknown_function")
                    parts.append({"functionResponse": {"name": name, "response": {key: b.content}}})
            for b in m.content:
                if isinstance(b, TextBlock) and b.text:
                    parts.append({"text": b.text})
                elif isinstance(b, ImageBlock):
                    parts.append({"inlineData": {"mimeType": b.media_type, "data": b.data}})
            role = "user"
        if not parts:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["parts"].extend(parts)
        else:
            out.append({"role": role, "parts": parts})
    return out


class _Stream(StreamAssembly):
    """Assembles one streamed GenerateContentResponse sequence."""

    def __init__(self, driver: GeminiProvider, req: ModelRequest, on_delta: DeltaSink | None) -> None:
        super().__init__(driver, req.model, on_delta)
        self.driver: GeminiProvider = driver
        self.req = req
        self.finish_reason: str | None = None
        self.signatures: list[str] = []
        self.calls: list[tuple[str | None, str, dict[str, Any]]] = []

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    async def feed(self, event: str, data: str) -> None:
        doc = json.loads(data)
        if not isinstance(doc, dict):
            raise self.driver.malformed(self.req.model, "a chunk is not a JSON object")
        if "error" in doc:
            raise self.driver.error_from(_vendor_error(doc, data, None), self.req.model)
        if doc.get("modelVersion"):
            self.model = str(doc["modelVersion"])
        feedback = doc.get("promptFeedback") or {}
        if feedback.get("blockReason"):
            raise self.driver.error_from(
                VendorError(f"prompt blocked: {feedback['blockReason']}", code="PROMPT_BLOCKED"), self.req.model,
                status=400,
            )
        if isinstance(doc.get("usageMetadata"), dict):
            self._usage(doc["usageMetadata"])
        for cand in (doc.get("candidates") or [])[:1]:
            for part in (cand.get("content") or {}).get("parts") or []:
                await self._part(part)
            if cand.get("finishReason"):
                self.finish_reason = str(cand["finishReason"])
                if self.finish_reason == "MALFORMED_FUNCTION_CALL":
                    raise self.driver.error_from(
                        VendorError("the model wrote a malformed function call", code="MALFORMED_FUNCTION_CALL",
                                    retryable=True),
                        self.req.model,
                    )

    async def _part(self, part: dict[str, Any]) -> None:
        if part.get("thoughtSignature"):
            self.signatures.append(str(part["thoughtSignature"]))
        if "functionCall" in part:
            fc = part["functionCall"]
            args = fc.get("args") or {}
            if not isinstance(args, dict):
                raise self.driver.malformed(self.req.model, "functionCall.args is not an object")
            self.calls.append((fc.get("id"), str(fc["name"]), args))
        elif "text" in part:
            text = str(part["text"])
            await (self.add_reasoning(text) if part.get("thought") else self.add_text(text))

    def _usage(self, u: dict[str, Any]) -> None:
        prompt = int(u.get("promptTokenCount") or 0)
        cached = int(u.get("cachedContentTokenCount") or 0)
        self.usage = Usage(
            input_tokens=max(0, prompt - cached),
            output_tokens=int(u.get("candidatesTokenCount") or 0) + int(u.get("thoughtsTokenCount") or 0),
            cache_read_input_tokens=cached,
        )

    def blocks(self) -> list[Block]:
        out: list[Block] = []
        if self.reasoning:
            out.append(ThinkingBlock("".join(self.reasoning), None, source="gemini"))
        out.extend(ThinkingBlock("", sig, source="gemini") for sig in self.signatures)
        if self.text:
            out.append(TextBlock("".join(self.text)))
        run = self.req.run
        for i, (cid, name, args) in enumerate(self.calls):
            out.append(ToolUseBlock(str(cid) if cid else _call_id(run.run_id if run else "", run, i), name, args))
        return out


def _call_id(run_id: str, run: Any, index: int) -> str:
    """Gemini function calls carry no id; derive a stable one (the engine keeps ids unique per run)."""
    it = run.iteration if run else 0
    att = run.attempt if run else 0
    return "gfc_" + hashlib.blake2b(f"{run_id}|{it}|{att}|{index}".encode(), digest_size=10).hexdigest()


def gemini_effort_budget(effort: str, max_tokens: int) -> int:
    """loomcycle's geminiEffortBudget: low 0, medium 2048, high 8192, each kept under max_tokens."""
    if effort == "low":
        return 0
    budget, margin, floor = (2048, 256, 1) if effort == "medium" else (8192, 1024, 1024)
    if max_tokens > 0 and budget >= max_tokens:
        budget = max_tokens - margin
        if budget < floor:
            return 0
    return budget
