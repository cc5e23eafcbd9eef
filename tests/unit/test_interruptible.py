"""engine/cancelling.py `interruptible`: the step's work runs in its own task, which listens to
the run's CancelSignal; a confirmed cancel aborts the work as StepInterrupted, anything else goes
on — without a task per awaited call."""

from __future__ import annotations

import asyncio

import pytest

from treadle.domain.signals import CancelSignal
from treadle.engine.cancelling import StepInterrupted, interruptible
from treadle.store.cancels import CancelState

CANCELLED = CancelState(cancel_requested=True, cancel_reason="user", turn_cancel_pending=False)
NOTHING = CancelState(cancel_requested=False, cancel_reason=None, turn_cancel_pending=False)


def checker(*states: CancelState) -> tuple[list[int], object]:
    calls: list[int] = []

    async def check() -> CancelState:
        calls.append(1)
        await asyncio.sleep(0)  # a query: the check yields to the loop
        return states[min(len(calls), len(states)) - 1]

    return calls, check


async def test_no_task_is_made_for_a_call_no_cancel_reaches() -> None:
    signal = CancelSignal()
    _, check = checker(NOTHING)
    seen: list[int] = []

    async def work() -> str:
        seen.append(len(asyncio.all_tasks()))
        await asyncio.sleep(0.01)
        return "answer"

    before = len(asyncio.all_tasks())
    assert await interruptible(work(), signal, check) == "answer"  # type: ignore[arg-type]
    assert seen == [before]


async def test_a_confirmed_cancel_aborts_the_work_as_step_interrupted() -> None:
    signal = CancelSignal()
    calls, check = checker(CANCELLED)
    aborted = asyncio.Event()

    async def work() -> str:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            aborted.set()
            raise
        return "never"

    async def cancel_soon() -> None:
        await asyncio.sleep(0.01)
        signal.set()

    helper = asyncio.create_task(cancel_soon())
    with pytest.raises(StepInterrupted) as raised:
        await interruptible(work(), signal, check)  # type: ignore[arg-type]
    await helper
    assert raised.value.state is CANCELLED and aborted.is_set() and calls == [1]
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_a_signal_for_a_handled_cancel_lets_the_work_finish() -> None:
    signal = CancelSignal()
    calls, check = checker(NOTHING)

    async def work() -> str:
        await asyncio.sleep(0.01)
        signal.set()  # heard mid-call: the check finds nothing pending
        await asyncio.sleep(0.02)
        return "done"

    assert await interruptible(work(), signal, check) == "done"  # type: ignore[arg-type]
    assert calls == [1] and not signal.is_set()


async def test_work_that_swallows_the_cancel_still_ends_interrupted() -> None:
    signal = CancelSignal()
    _, check = checker(CANCELLED)

    async def stubborn() -> str:
        signal.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            return "swallowed"
        return "never"

    with pytest.raises(StepInterrupted):
        await interruptible(stubborn(), signal, check)  # type: ignore[arg-type]
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
    await asyncio.sleep(0)  # no cancel left pending on the caller


@pytest.mark.parametrize("when", ["before the check confirms", "after the check confirmed"])
async def test_a_cancel_of_the_caller_itself_is_not_turned_into_step_interrupted(when: str) -> None:
    signal = CancelSignal()
    _, check = checker(CANCELLED)
    started = asyncio.Event()

    async def work() -> str:
        started.set()
        await asyncio.sleep(30)
        return "never"

    async def step() -> str:
        return await interruptible(work(), signal, check)  # type: ignore[arg-type]

    task = asyncio.create_task(step())
    await started.wait()
    signal.set()  # the check is under way ...
    if when == "after the check confirmed":
        while task.cancelling() == 0:  # noqa: ASYNC110 - no event tells when the check cancelled the work
            await asyncio.sleep(0)
    task.cancel()  # ... when the worker is stopped: the stop wins
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_failing_check_fails_the_call() -> None:
    signal = CancelSignal()

    async def check() -> CancelState:
        raise RuntimeError("database gone")

    async def work() -> str:
        signal.set()
        await asyncio.sleep(30)
        return "never"

    with pytest.raises(RuntimeError, match="database gone"):
        await interruptible(work(), signal, check)
