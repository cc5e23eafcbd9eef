"""engine/slots.py: steps coming back from a model call go before claimers; nothing is lost to
a cancel."""

from __future__ import annotations

import asyncio
import contextlib

from treadle.engine.slots import HELD, Slot, Slots, slot_given_back


async def test_a_resuming_step_takes_the_next_slot_before_a_claimer() -> None:
    slots = Slots(1)
    await slots.acquire(resuming=False)
    order: list[str] = []

    async def take(name: str, resuming: bool) -> None:
        await slots.acquire(resuming=resuming)
        order.append(name)

    claimer = asyncio.create_task(take("claimer", False))
    await asyncio.sleep(0)
    resumer = asyncio.create_task(take("resumer", True))
    await asyncio.sleep(0)
    slots.release()
    await asyncio.sleep(0)
    assert order == ["resumer"] and slots.free == 0
    slots.release()
    await asyncio.gather(claimer, resumer)
    assert order == ["resumer", "claimer"]
    slots.release()
    assert slots.free == 1


async def test_a_waiter_cancelled_gives_its_slot_on() -> None:
    slots = Slots(1)
    await slots.acquire(resuming=False)
    cancelled = asyncio.create_task(slots.acquire(resuming=False))
    other = asyncio.create_task(slots.acquire(resuming=False))
    await asyncio.sleep(0)
    slots.release()  # handed to `cancelled`...
    cancelled.cancel()  # ...which is cancelled before it runs: the slot goes on to `other`
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert cancelled.cancelled() and other.done() and slots.free == 0
    slots.release()
    assert slots.free == 1


async def test_a_step_gives_its_slot_back_while_it_waits() -> None:
    slots = Slots(1)
    await slots.acquire(resuming=False)
    slot = Slot(slots)
    HELD.set(slot)
    seen: list[int] = []

    async def wait_on_model() -> None:
        seen.append(slots.free)

    async with slot_given_back():
        await wait_on_model()
    assert seen == [1] and slots.free == 0 and slot.held  # free while it waited, held again after
    slot.release()
    slot.release()  # once only
    assert slots.free == 1


async def test_a_step_cancelled_while_it_waits_for_its_slot_back_releases_nothing() -> None:
    slots = Slots(1)
    await slots.acquire(resuming=False)
    slot = Slot(slots)

    async def step() -> None:
        HELD.set(slot)
        async with slot_given_back():
            await slots.acquire(resuming=False)  # someone else takes the free slot meanwhile
        raise AssertionError("unreachable: the slot never comes back")

    task = asyncio.create_task(step())
    for _ in range(5):
        await asyncio.sleep(0)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert not slot.held
    slot.release()  # the worker's final release: nothing to give back
    assert slots.free == 0  # the other holder still has the one slot


async def test_without_a_slot_nothing_is_given_back() -> None:
    HELD.set(None)
    async with slot_given_back():
        pass


async def test_a_wait_shorter_than_the_hold_keeps_the_slot() -> None:
    slots = Slots(1)
    await slots.acquire(resuming=False)
    slot = Slot(slots)
    HELD.set(slot)
    async with slot_given_back(after_s=10.0):
        assert slots.free == 0  # an instant answer: nothing handed over
    async with slot_given_back(after_s=0.01):
        await asyncio.sleep(0.05)
        assert slots.free == 1 and not slot.held  # a long wait: given back meanwhile
    assert slot.held and slots.free == 0


async def test_steps_take_slots_back_oldest_run_first() -> None:
    slots = Slots(1)
    await slots.acquire(resuming=False)
    order: list[float] = []

    async def back(priority: float) -> None:
        await slots.acquire(resuming=True, priority=priority)
        order.append(priority)
        slots.release()

    waiters = [asyncio.create_task(back(p)) for p in (3.0, 1.0, 2.0)]
    await asyncio.sleep(0)
    slots.release()
    await asyncio.gather(*waiters)
    assert order == [1.0, 2.0, 3.0] and slots.free == 1
