"""Cancels that stop work at once: a step races its model call and its external tool calls
against the run's cancel signal (store/cancels.py says how the signal is heard in each shape).

When the signal fires the engine reads what happened (`CancelState`): a run cancel or a turn
cancel aborts the awaited work (the provider's HTTP request is dropped with its task) and the
step ends the run — or the turn — instead of committing the aborted call. Anything else (a
notification for a cancel that was already handled) just goes on waiting.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol, TypeVar

from treadle.domain.tasks import cancel_and_wait
from treadle.store.cancels import CancelState

T = TypeVar("T")


class CancelWatch(Protocol):
    def watch(self, run_id: str) -> AbstractAsyncContextManager[asyncio.Event]: ...


class StepInterrupted(Exception):
    """The awaited work was aborted because the run (or its turn) was cancelled."""

    def __init__(self, state: CancelState) -> None:
        super().__init__("cancelled" if state.cancel_requested else "turn cancelled")
        self.state = state


async def interruptible(
    work: Awaitable[T], signal: asyncio.Event | None, check: Callable[[], Awaitable[CancelState]]
) -> T:
    """`await work`, unless `signal` fires and `check()` confirms a cancel: then the work is
    cancelled and StepInterrupted raised."""
    if signal is None:
        return await work
    if signal.is_set():  # heard before the work began (a chained step, a notification that raced the lease)
        state = await check()
        if state.any:
            if asyncio.iscoroutine(work):
                work.close()  # never started
            raise StepInterrupted(state)
        signal.clear()
    task: asyncio.Future[T] = asyncio.ensure_future(work)
    waiter: asyncio.Task[bool] | None = None
    try:
        while True:
            waiter = asyncio.create_task(signal.wait())
            pending: set[asyncio.Future[Any]] = {task, waiter}
            await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            if task.done():
                return task.result()
            state = await check()
            if state.any:
                raise StepInterrupted(state)
            signal.clear()
    finally:
        if waiter is not None and not waiter.done():
            waiter.cancel()
        if not task.done():
            await cancel_and_wait(task)
