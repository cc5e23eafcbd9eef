"""Which model answers an iteration: same-provider retries, then the next tier candidate.

For each candidate in the agent's route (one, unless it names a tier):
1. the transcript is adapted to it — thinking blocks it cannot read (another vendor's reasoning,
   or any reasoning for a driver that echoes none) are dropped, with a `reasoning_invalidated`
   event when that happens because the run moved to this provider;
2. a `RetryableProviderError` (429, 5xx, timeouts, a cut stream) is retried on the same candidate
   up to `retries` times, waiting `Retry-After` when the vendor sent one, else 100 ms * 3^(n-1),
   capped — each wait is a `retry` event;
3. when retries run out (or the provider does not serve the model) the next candidate takes over:
   a `provider_fallback` event. Auth failures, bad requests and context-length errors are not
   something another provider fixes; they fail the iteration at once.
With `pin_after_success`, a run that has been answered once stays on that candidate (a failure
there emits `fallback_suppressed` and fails the iteration).

Every event goes into the caller's list, which the engine persists whatever the outcome.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

from treadle.domain.content import Message, ThinkingBlock, ToolUseBlock
from treadle.domain.events import EventType
from treadle.domain.runs import NewEvent
from treadle.engine.model_routes import Candidate, ModelRoute
from treadle.errors import ProviderError, RetryableProviderError, UnknownModel
from treadle.providers.base import DeltaSink, ModelRequest, ModelResponse, RunInfo
from treadle.providers.observed import observed_call

log = logging.getLogger("treadle.engine")

SinkFactory = Callable[[Candidate, int], DeltaSink | None]


@dataclass(slots=True)
class RetryPolicy:
    retries: int = 4
    max_wait_s: float = 10.0
    base_s: float = 0.1


@dataclass(slots=True)
class Call:
    """Everything about the iteration except which model answers it."""

    run_id: str
    agent: str
    iteration: int
    system: str
    messages: list[Message]
    request: dict[str, Any]  # tools, max_tokens, and options every candidate gets (mock settings)
    history: list[tuple[int, str, dict[str, Any]]]  # the run's events so far
    #: what the engine's replay already knows about `messages` (engine/replay.py `Transcript`):
    #: their tool_use ids (None: read them off the messages) and whether any holds reasoning
    tool_ids: AbstractSet[str] | None = None
    has_thinking: bool = True


async def call_route(
    route: ModelRoute,
    call: Call,
    policy: RetryPolicy,
    events: list[NewEvent],
    sink: SinkFactory | None = None,
) -> ModelResponse:
    candidates = list(route.candidates)
    last_provider = _last_served(call.history)
    pinned = False
    if route.pin_after_success and len(candidates) > 1 and last_provider is not None:
        match = [c for c in candidates if (c.provider_id, c.model) == last_provider]
        if match:
            candidates, pinned = match[:1], True

    attempts = 0  # across candidates, for live frames
    last_exc: ProviderError | None = None
    for index, cand in enumerate(candidates):
        messages, dropped = (adapt_messages(call.messages, cand.reasoning_format) if call.has_thinking
                             else (call.messages, 0))
        moved = index > 0 or (last_provider is not None and last_provider[0] != cand.provider_id)
        if dropped and moved:
            events.append(
                NewEvent(
                    EventType.REASONING_INVALIDATED,
                    {
                        "text": f"{dropped} reasoning block(s) dropped: {cand.provider_id} cannot read them",
                        "provider": cand.provider_id,
                        "model": cand.model,
                        "dropped": dropped,
                        "iteration": call.iteration,
                    },
                )
            )
        retries = policy.retries if cand.retries is None else cand.retries
        attempt = 0
        while True:
            attempts += 1
            req = ModelRequest(
                model=cand.model,
                system=call.system,
                messages=messages,
                tools=call.request.get("tools") or [],
                max_tokens=int(call.request.get("max_tokens") or 4096),
                run=RunInfo(call.run_id, call.agent, call.iteration, attempt),
                options={**cand.options, **(call.request.get("options") or {})},
            )
            try:
                response = await observed_call(cand.provider, cand.provider_id, req,
                                               sink(cand, attempts) if sink else None, fallback=index > 0)
            except RetryableProviderError as exc:
                last_exc = exc
                if attempt >= retries:
                    break
                attempt += 1
                if exc.retry_after_s is not None:
                    wait, reason = exc.retry_after_s, "retry-after header"
                else:
                    wait, reason = policy.base_s * 3 ** (attempt - 1), "exponential backoff"
                wait = min(wait, policy.max_wait_s)
                events.append(
                    NewEvent(
                        EventType.RETRY,
                        {
                            "retry": {
                                "provider": cand.provider_id,
                                "model": cand.model,
                                "attempt": attempt,
                                "wait_ms": int(wait * 1000),
                                "reason": reason,
                                "code": exc.code,
                                "error": exc.message,
                            },
                            "iteration": call.iteration,
                        },
                    )
                )
                await asyncio.sleep(wait)
                continue
            except UnknownModel as exc:
                last_exc = exc
                break
            except ProviderError:
                raise
            except Exception as exc:  # a driver bug must still end as an error event, not a crashed step
                log.exception("provider %s raised outside its error contract", cand.provider_id)
                raise ProviderError(
                    f"{cand.provider_id}: internal driver error: {type(exc).__name__}: {exc}",
                    details={"provider": cand.provider_id, "model": cand.model},
                ) from exc
            response.provider = cand.provider_id
            response.model = cand.model
            _unique_tool_ids(response, call)
            return response

        assert last_exc is not None
        if index + 1 < len(candidates):
            nxt = candidates[index + 1]
            events.append(
                NewEvent(
                    EventType.PROVIDER_FALLBACK,
                    {
                        "fallback": {
                            "failed_provider": cand.provider_id,
                            "failed_model": cand.model,
                            "new_provider": nxt.provider_id,
                            "new_model": nxt.model,
                            "attempt": index + 1,
                            "tier": route.tier,
                            "reason": last_exc.code,
                            "cause_error": last_exc.message,
                        },
                        "iteration": call.iteration,
                    },
                )
            )
        elif pinned:
            events.append(
                NewEvent(
                    EventType.FALLBACK_SUPPRESSED,
                    {
                        "text": f"{cand.provider_id}/{cand.model} failed; the run is pinned to it (pin_after_success)",
                        "provider": cand.provider_id,
                        "model": cand.model,
                        "reason": last_exc.code,
                        "iteration": call.iteration,
                    },
                )
            )
    assert last_exc is not None
    raise last_exc


def adapt_messages(messages: list[Message], reasoning_format: str | None) -> tuple[list[Message], int]:
    """The transcript as `reasoning_format` can read it: foreign thinking blocks removed."""
    dropped = 0
    out: list[Message] = []
    for m in messages:
        if m.role != "assistant" or not any(isinstance(b, ThinkingBlock) for b in m.content):
            out.append(m)
            continue
        keep = []
        for b in m.content:
            if isinstance(b, ThinkingBlock) and not _readable(b, reasoning_format):
                dropped += 1
                continue
            keep.append(b)
        out.append(Message(m.role, keep))
    return out, dropped


def _readable(b: ThinkingBlock, fmt: str | None) -> bool:
    source = b.source or ("anthropic" if b.signature else None)
    return fmt is not None and source == fmt


def _last_served(history: list[tuple[int, str, dict[str, Any]]]) -> tuple[str, str] | None:
    for _seq, etype, payload in reversed(history):
        if etype == EventType.USAGE:
            u = payload.get("usage") or {}
            if u.get("provider") and u.get("model"):
                return str(u["provider"]), str(u["model"])
    return None


def _unique_tool_ids(response: ModelResponse, call: Call) -> None:
    """Tool ids must be unique within a run (results are keyed by them); vendors that omit or
    reuse ids get a deterministic one."""
    used = call.tool_ids if call.tool_ids is not None else {tu.id for m in call.messages for tu in m.tool_uses()}
    fresh: set[str] = set()
    for i, b in enumerate(response.content):
        if isinstance(b, ToolUseBlock):
            if not b.id or b.id in used or b.id in fresh or len(b.id) > 64:
                digest = hashlib.blake2b(f"{call.run_id}|{call.iteration}|{i}".encode(), digest_size=12).hexdigest()
                b.id = f"toolu_{digest}"
            fresh.add(b.id)
