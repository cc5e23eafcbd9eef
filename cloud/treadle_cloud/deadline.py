"""A worker invocation's deadline, applied to the model calls its steps make.

Lambda kills an invocation at its timeout, wherever it is — possibly between a step's commit and
the message that enqueues the next step. So the worker keeps the end in view instead:

- every provider is wrapped (`DeadlineProvider`): a model call still running when the invocation
  reaches `deadline` is abandoned and `InvocationEnding` raised. Nothing of the step was written
  yet (the assistant turn is recorded only after the call returns), and the exception derives
  from BaseException, so the engine's crash handling and the provider routing's retries (which
  catch Exception) let it pass: the worker hands the step back (`SqsWorker`);
- commits and tool calls are never interrupted: a step that is past its model call finishes.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from treadle.providers.base import DeltaSink, ModelRequest, ModelResponse, Provider


class InvocationEnding(BaseException):
    """The invocation's deadline came during a model call: the step goes back to the queue."""


class InvocationClock:
    """The monotonic deadline of the invocation under way (None between invocations)."""

    def __init__(self) -> None:
        self.deadline: float | None = None

    def remaining(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()


class DeadlineProvider:
    """`inner`, with each call bounded by `clock` (and unbounded when no invocation is under way)."""

    def __init__(self, inner: Provider, clock: InvocationClock) -> None:
        self.inner = inner
        self.name = inner.name
        self.clock = clock

    def __getattr__(self, attr: str) -> Any:  # reasoning_format, aclose, a driver's extras
        return getattr(self.inner, attr)

    async def call(self, req: ModelRequest, on_delta: DeltaSink | None = None) -> ModelResponse:
        left = self.clock.remaining()
        if left is None:
            return await self.inner.call(req, on_delta)
        if left <= 0:
            raise InvocationEnding("no time left in this invocation for a model call")
        bound = asyncio.timeout(left)
        try:
            async with bound:
                return await self.inner.call(req, on_delta)
        except TimeoutError:
            if bound.expired():
                raise InvocationEnding(f"the model call outlasted the invocation ({left:.1f} s left at its start)"
                                       ) from None
            raise


def with_deadline(providers: dict[str, Provider], clock: InvocationClock) -> dict[str, Provider]:
    return {name: DeadlineProvider(p, clock) for name, p in providers.items()}
