"""Inline dispatcher for tests: enqueued steps run in-process, in order, when drained."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from treadle.domain.runs import StepMessage

StepHandler = Callable[[StepMessage], Awaitable[object]]


@dataclass
class InlineDispatcher:
    jobs_in_db: bool = False
    duplicate_every_message: bool = False
    handler: StepHandler | None = None
    queue: list[StepMessage] = field(default_factory=list)
    delivered: list[StepMessage] = field(default_factory=list)

    async def enqueue(self, msg: StepMessage, delay_s: float = 0.0) -> None:
        self.queue.append(msg)
        if self.duplicate_every_message:
            self.queue.append(msg)

    async def drain(self, max_steps: int = 10_000) -> int:
        """Deliver queued messages until none is left; returns how many were delivered."""
        if self.handler is None:
            raise RuntimeError("InlineDispatcher.handler is not set")
        n = 0
        while self.queue:
            if n >= max_steps:
                raise RuntimeError(f"inline dispatcher: more than {max_steps} deliveries")
            msg = self.queue.pop(0)
            self.delivered.append(msg)
            await self.handler(msg)
            n += 1
            await asyncio.sleep(0)
        return n
