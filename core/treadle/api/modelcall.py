"""One model call without the agent loop — what the LLM gateway (`/v1/_llm/chat`) and the
OpenAI-compatible chat route share: which candidates answer (a pinned provider + model, a
`models:` alias, a `tiers:` entry), the engine's retries and tier fallback (engine/routing.py),
and live text deltas reconciled with the assembled answer.

No run row, no events table: the call is not durable (a crash loses it, the client retries).
Each call writes one structured audit line to the `treadle.audit` logger (`llm_call: ...`).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from treadle.domain.content import Message, TextBlock
from treadle.domain.events import EventType
from treadle.domain.runs import NewEvent
from treadle.engine.model_routes import Candidate, ModelRoute, Routes
from treadle.engine.routing import Call, RetryPolicy, call_route
from treadle.errors import ProviderError
from treadle.providers.base import DeltaSink, ModelResponse, ToolSpec
from treadle.runtime import Runtime

audit = logging.getLogger("treadle.audit")
DEFAULT_MAX_TOKENS = 4096


def new_request_id() -> str:
    return "req_" + secrets.token_hex(8)


def alias_route(rt: Runtime, alias: str) -> ModelRoute:
    return Routes(rt.config, rt.providers).alias(alias)


def tier_route(rt: Runtime, tier: str) -> ModelRoute:
    return Routes(rt.config, rt.providers).tier(tier)


def pinned_route(rt: Runtime, provider: str, model: str) -> ModelRoute:
    return Routes(rt.config, rt.providers).pinned(provider, model)


def gateway_route(rt: Runtime, *, provider: str | None, model: str | None, tier: str | None) -> ModelRoute:
    """loomcycle's precedence (engine/model_routes.py Routes.gateway)."""
    return Routes(rt.config, rt.providers).gateway(provider=provider, model=model, tier=tier)


@dataclass(slots=True)
class ModelCall:
    """A conversation for one model call (system text, normalized messages, tools)."""

    system: str
    messages: list[Message]
    tools: list[ToolSpec] = field(default_factory=list)
    max_tokens: int = DEFAULT_MAX_TOKENS
    options: dict[str, Any] = field(default_factory=dict)  # temperature, …
    request_id: str = field(default_factory=new_request_id)

    def routing_call(self) -> Call:
        return Call(run_id=self.request_id, agent="llm_gateway", iteration=1, system=self.system,
                    messages=self.messages,
                    request={"tools": self.tools, "max_tokens": self.max_tokens, "options": self.options},
                    history=[])


def _policy(rt: Runtime) -> RetryPolicy:
    s = rt.engine.settings
    return RetryPolicy(retries=s.provider_retries, max_wait_s=s.max_retry_wait_s)


def log_call(kind: str, mc: ModelCall, route: ModelRoute, *, who: str, user_id: str | None, started: float,
             response: ModelResponse | None, error: ProviderError | None, events: list[NewEvent]) -> None:
    audit.info(
        "%s: request_id=%s tenant=%s user_id=%s tier=%s provider=%s model=%s input_tokens=%d output_tokens=%d "
        "stop_reason=%s retries=%d fallbacks=%d latency_ms=%d status=%s error=%s",
        kind, mc.request_id, who, user_id or "", route.tier or "",
        response.provider if response else route.candidates[0].provider_id,
        response.model if response else route.candidates[0].model,
        response.usage.input_tokens if response else 0, response.usage.output_tokens if response else 0,
        response.stop_reason if response else "error",
        sum(e.type == EventType.RETRY for e in events), sum(e.type == EventType.PROVIDER_FALLBACK for e in events),
        int((time.monotonic() - started) * 1000), "error" if error else "ok", error.code if error else "",
    )


async def call_once(rt: Runtime, route: ModelRoute, mc: ModelCall, events: list[NewEvent]) -> ModelResponse:
    """The answer through the route (retries, then the next candidate); ProviderError when all fail."""
    return await call_route(route, mc.routing_call(), _policy(rt), events)


async def call_logged(rt: Runtime, route: ModelRoute, mc: ModelCall, kind: str, *, who: str,
                      user_id: str | None) -> ModelResponse:
    """`call_once`, with its audit line (`log_call`) whether it answers or fails."""
    started, events = time.monotonic(), list[NewEvent]()
    try:
        resp = await call_once(rt, route, mc, events)
    except ProviderError as exc:
        log_call(kind, mc, route, who=who, user_id=user_id, started=started, response=None, error=exc, events=events)
        raise
    log_call(kind, mc, route, who=who, user_id=user_id, started=started, response=resp, error=None, events=events)
    return resp


class StreamRestarted(ProviderError):
    code = "stream_restarted"


class TextReconciler:
    """Live deltas of one answer and the text finally assembled: a delta from a later attempt than
    the first one streamed (the vendor failed mid-stream and was retried) is not forwarded; the
    assembled text then either extends what was sent (the rest is sent) or it does not — then the
    client holds text that is not the answer, and the stream ends with `stream_restarted`."""

    def __init__(self) -> None:
        self.sent = ""
        self._attempt: int | None = None
        self._frozen = False

    def delta(self, attempt: int, text: str) -> str:
        if self._attempt is None:
            self._attempt = attempt
        if self._frozen or attempt != self._attempt:
            self._frozen = True
            return ""
        self.sent += text
        return text

    def rest(self, final: str) -> str:
        if not final.startswith(self.sent):
            raise StreamRestarted("the model's answer was restarted after part of it was streamed "
                                  "(a retry or fallback mid-stream); discard the streamed text and retry")
        rest, self.sent = final[len(self.sent):], final
        return rest


@dataclass(frozen=True, slots=True)
class Chosen:
    provider: str
    model: str


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


StreamItem = Chosen | TextDelta | ModelResponse


async def stream_once(rt: Runtime, route: ModelRoute, mc: ModelCall, events: list[NewEvent]) -> AsyncIterator[
        StreamItem]:
    """`Chosen` (once, before any text), `TextDelta`s, then the `ModelResponse` (its text already
    fully sent as deltas). Raises ProviderError when every candidate failed."""
    queue: asyncio.Queue[tuple[Candidate | None, int, str] | ModelResponse | BaseException] = asyncio.Queue()

    def sink(cand: Candidate, attempt: int) -> DeltaSink:
        async def push(kind: str, delta: str) -> None:
            if kind == "text" and delta:
                queue.put_nowait((cand, attempt, delta))
        return push

    async def run() -> None:
        try:
            queue.put_nowait(await call_route(route, mc.routing_call(), _policy(rt), events, sink))
        except BaseException as exc:  # handed to the reader, which re-raises it
            queue.put_nowait(exc)

    task = asyncio.ensure_future(run())
    text = TextReconciler()
    chosen = False
    try:
        while True:
            item = await queue.get()
            if isinstance(item, BaseException):
                raise item
            if isinstance(item, ModelResponse):
                if not chosen:
                    yield Chosen(item.provider, item.model)
                rest = text.rest("".join(b.text for b in item.content if isinstance(b, TextBlock)))
                if rest:
                    yield TextDelta(rest)
                yield item
                return
            cand, attempt, delta = item
            if not chosen and cand is not None:
                chosen = True
                yield Chosen(cand.provider_id, cand.model)
            forwarded = text.delta(attempt, delta)
            if forwarded:
                yield TextDelta(forwarded)
    finally:
        if not task.done():
            task.cancel()
