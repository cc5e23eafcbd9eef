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
from typing import Protocol, TypeVar

from treadle.domain.signals import CancelSignal
from treadle.domain.tasks import cancel_and_wait
from treadle.store.cancels import CancelState

T = TypeVar("T")


class CancelWatch(Protocol):
    def watch(self, run_id: str) -> AbstractAsyncContextManager[CancelSignal]: ...


class StepInterrupted(Exception):
    """The awaited work was aborted because the run (or its turn) was cancelled."""

    def __init__(self, state: CancelState) -> None:
        super().__init__("cancelled" if state.cancel_requested else "turn cancelled")
        self.state = state
        #: the provider whose call was aborted, when it names the cancel (a code agent's replay:
        #: `code_agent_cancelled`, engine/step.py)
        self.code: str | None = None


async def interruptible(
    work: Awaitable[T], signal: CancelSignal | None, check: Callable[[], Awaitable[CancelState]]
) -> T:
    """`await work`, unless `signal` fires and `check()` confirms a cancel: then the work is
    cancelled and StepInterrupted raised.

    The work runs in the caller's task, which listens to the signal: when it fires, a task of its
    own runs `check()` and, on a cancel, cancels the caller — that cancel, and only it, becomes
    StepInterrupted (a cancel from outside, e.g. a worker's stop, still propagates). Nothing is
    created per call on the path where no cancel lands."""
    if signal is None:
        return await work
    if signal.is_set():  # heard before the work began (a chained step, a notification that raced the lease)
        state = await check()
        if state.any:
            if asyncio.iscoroutine(work):
                work.close()  # never started
            raise StepInterrupted(state)
        signal.clear()
    caller = asyncio.current_task()
    assert caller is not None
    listening = True
    interrupt: BaseException | None = None  # StepInterrupted, or the check's own failure
    checking: asyncio.Task[None] | None = None

    async def confirm() -> None:
        nonlocal interrupt
        try:
            state = await check()
        except Exception as exc:  # as if `check()` had failed in the caller: the step fails
            found: BaseException = exc
        else:
            if not state.any:
                if listening:
                    signal.clear()
                return
            found = StepInterrupted(state)
        if listening:  # else the work ended meanwhile: a pending cancel stays signalled for the step
            interrupt = found
            caller.cancel()

    def heard() -> None:
        nonlocal checking
        if checking is None or checking.done():
            checking = asyncio.create_task(confirm())

    signal.add_listener(heard)
    try:
        result = await work
    except BaseException as exc:
        if interrupt is None:
            raise
        if caller.uncancel() > 0 and isinstance(exc, asyncio.CancelledError):
            raise  # cancelled from outside as well: that cancel wins
        raise interrupt from None
    finally:
        listening = False
        signal.remove_listener(heard)
        if checking is not None and not checking.done():
            await cancel_and_wait(checking)
    if interrupt is not None:  # the work swallowed the cancel; it was confirmed all the same
        caller.uncancel()
        raise interrupt
    return result
