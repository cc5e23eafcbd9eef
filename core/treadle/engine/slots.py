"""Worker slots: how many steps *compute* at once in a process — not how many are in flight.

A step holds a slot while it works (its claim, replay, tools, commit) and gives it back while it
waits on its model or on external tools (`Engine._interruptible`), so thousands of runs can wait on
models at once while `size` steps use the CPU and the database. A step coming back from such a wait
takes a slot before any claimer that would start new work, and the oldest run's step first: under a
backlog the runs started first keep the process and finish near their own latency, new runs start
when there is room, and the queue (oldest runs' steps first, store/steps.py `_next_job`) holds the
rest — instead of every run advancing in lockstep. Claimers are served in order.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar


class Slot:
    """One step's slot: whether it holds it right now (it does not while it waits)."""

    __slots__ = ("held", "priority", "slots")

    def __init__(self, slots: Slots, priority: float = 0.0) -> None:
        self.slots = slots
        self.held = True
        #: when its run started (older runs take a slot back first)
        self.priority = priority

    def release(self) -> None:
        if self.held:
            self.held = False
            self.slots.release()


#: the slot the current task's step holds (set by the worker that started it)
HELD: ContextVar[Slot | None] = ContextVar("treadle_worker_slot", default=None)


class Slots:
    def __init__(self, size: int) -> None:
        self.size = size
        self.free = size
        #: steps back from a wait, oldest run first: (priority, arrival, future)
        self._resuming: list[tuple[float, int, asyncio.Future[None]]] = []
        self._claiming: deque[asyncio.Future[None]] = deque()
        self._arrival = itertools.count()

    async def acquire(self, *, resuming: bool, priority: float = 0.0) -> None:
        if self.free > 0 and not self._resuming and (resuming or not self._claiming):
            self.free -= 1
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if resuming:
            heapq.heappush(self._resuming, (priority, next(self._arrival), fut))
        else:
            self._claiming.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()  # handed over just as it was cancelled: pass it on
            # else: left in its queue, skipped (done) when its turn comes
            raise

    def release(self) -> None:
        while self._resuming:
            fut = heapq.heappop(self._resuming)[2]
            if not fut.done():
                fut.set_result(None)  # the slot passes to this waiter
                return
        while self._claiming:
            fut = self._claiming.popleft()
            if not fut.done():
                fut.set_result(None)
                return
        self.free += 1



class SlotLoan:
    """The slot the current task's step holds, lent back during a wait on a model or a tool:
    `give_back` (plain, so one timer can fire it together with the connection's hand-back) and
    `take_back` after the wait, ahead of any claimer, oldest run first."""

    __slots__ = ("slot",)

    def __init__(self, slot: Slot) -> None:
        self.slot = slot

    def give_back(self) -> None:
        self.slot.release()

    async def take_back(self) -> None:
        slot = self.slot
        if not slot.held:  # a cancel here leaves it not held: nothing to release
            await slot.slots.acquire(resuming=True, priority=slot.priority)
            slot.held = True


def slot_loan() -> SlotLoan | None:
    """A loan of the slot this task's step holds; None for a step that holds none (the cloud
    shape's handler runs one step per invocation)."""
    slot = HELD.get()
    return SlotLoan(slot) if slot is not None and slot.held else None


@asynccontextmanager
async def slot_given_back(after_s: float = 0.0) -> AsyncIterator[None]:
    """Around a wait: give back the slot this task's step holds once it has waited `after_s` (a
    model that answers at once keeps it), and take one again after it (SlotLoan)."""
    loan = slot_loan()
    if loan is None:
        yield
        return
    timer = asyncio.get_running_loop().call_later(after_s, loan.give_back) if after_s > 0 else None
    if timer is None:
        loan.give_back()
    try:
        yield
    finally:
        if timer is not None:
            timer.cancel()
        await loan.take_back()
