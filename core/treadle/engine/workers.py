"""The sidecar's in-process workers over the Postgres queue, and the lease sweeper."""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable

from treadle.dispatch.base import Dispatcher
from treadle.dispatch.postgres import PostgresQueue
from treadle.domain.tasks import cancel_all_and_wait, cancel_and_wait
from treadle.engine.hub import wait_event
from treadle.engine.sending import StepSender
from treadle.engine.slots import HELD, Slot, Slots
from treadle.engine.step import Engine
from treadle.store.steps import LeasedRun
from treadle.telemetry.metrics import metrics

log = logging.getLogger("treadle.workers")


class WorkerPool:
    """`size` worker slots on the Postgres queue (engine/slots.py): a worker slot claims a job and
    runs its step (and the lease chain it starts) as a task of its own, and the step gives the slot
    back — and its database connection (`Pool.released`) — while its model or external tools
    answer, so a step waiting on a model holds neither (issue 32). A step coming back from its
    model takes a slot before new work is claimed. At most `max_in_flight` steps are in flight
    (waiting included): beyond that a job stays queued, for another replica or for later."""

    def __init__(self, engine: Engine, queue: PostgresQueue, size: int, *, idle_poll_s: float = 0.5,
                 max_in_flight: int = 4096) -> None:
        self.engine = engine
        self.queue = queue
        self.size = size
        self.idle_poll_s = idle_poll_s
        self.max_in_flight = max_in_flight
        self.slots = Slots(size)
        self._room = asyncio.Semaphore(max_in_flight)
        self._tasks: list[asyncio.Task[None]] = []
        #: the steps in flight now (each a task of its own)
        self._steps: set[asyncio.Task[None]] = set()
        self.steps_run = 0

    @property
    def in_flight(self) -> int:
        return len(self._steps)

    def start(self) -> None:
        self.queue.start_listening()
        self._tasks = [
            asyncio.create_task(self._work(i), name=f"treadle-worker-{i}") for i in range(self.size)
        ]

    async def stop(self) -> None:
        await cancel_all_and_wait(self._tasks)  # each once: a second cancel would cut a query's cancel short
        self._tasks = []
        await cancel_all_and_wait(list(self._steps))  # their leases expire; the sweeper re-enqueues them
        await self.queue.stop_listening()

    async def settle(self) -> None:
        """Wait for the steps in flight now to end (a test's, or a drain before stop)."""
        while self._steps:
            await asyncio.wait(set(self._steps))

    async def _claim_and_run(self) -> bool:
        """Claim the next due job (once there is room and a free worker slot) and start its step,
        which takes the slot over; False when the queue had none."""
        await self._room.acquire()
        try:
            await self.slots.acquire(resuming=False)
        except BaseException:
            self._room.release()
            raise
        owner = self.engine.new_owner()
        try:
            found, leased = await self.engine.steps.claim_job(owner)
        except BaseException:
            self._done()
            raise
        if leased is None:
            self._done()
            return found
        step = asyncio.create_task(self._run(leased, owner), name=f"treadle-step-{leased.run_id}")
        self._steps.add(step)
        step.add_done_callback(self._steps.discard)
        return True

    def _done(self, slot: Slot | None = None) -> None:
        if slot is None:
            self.slots.release()
        else:
            slot.release()  # unless the step was cancelled while it waited without one
        self._room.release()

    async def _run(self, leased: LeasedRun, owner: str) -> None:
        # the claimer's slot, taken over (given back while the step waits; older runs take it back first)
        slot = Slot(self.slots, leased.created_at.timestamp() if leased.created_at is not None else 0.0)
        HELD.set(slot)
        try:
            async with self.engine.steps.holding():  # one connection for the chain's statements
                await self.engine.run_leased(leased, owner)
            self.steps_run += 1
        except asyncio.CancelledError:
            raise
        except Exception:  # the engine hands a crashed step back itself; this is a bug's last stop
            log.exception("step of run %s", leased.run_id)
        finally:
            self._done(slot)

    async def _work(self, index: int) -> None:
        wakeup = self.queue.wakeup
        me = asyncio.current_task()
        while True:
            if me is not None and me.cancelling():
                # a stop that something below swallowed (Python 3.11's wait_for, a library's
                # cleanup): it still stops this worker, at the next job boundary
                raise asyncio.CancelledError
            try:
                if await self._claim_and_run():
                    continue
                wakeup.clear()
                if await self._claim_and_run():  # a job may have landed before the clear
                    continue
                await wait_event(wakeup, self.idle_poll_s)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("worker %d: %s", index, exc)
                await asyncio.sleep(0.5)


class PeriodicTask(ABC):
    """A background loop calling `run_once` every `interval_s` (errors are logged, never fatal)."""

    task_name = "treadle-periodic"
    interval_s: float
    _task: asyncio.Task[None] | None = None

    @abstractmethod
    async def run_once(self) -> object:
        ...

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name=self.task_name)

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None

    async def _loop(self) -> None:
        while True:
            try:
                await self.run_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("%s failed: %s", self.task_name, exc)
            await asyncio.sleep(self.interval_s)


class Sweeper(PeriodicTask):
    """Re-enqueues steps whose lease expired (worker died) or whose message was lost."""

    task_name = "treadle-sweeper"

    def __init__(
        self,
        engine: Engine,
        dispatcher: Dispatcher,
        interval_s: float,
        wake_due: Callable[[], Awaitable[int]] | None = None,
    ) -> None:
        self.wake_due = wake_due
        self.engine = engine
        self.dispatcher = dispatcher
        self.sender = StepSender(dispatcher)
        self.interval_s = interval_s
        self.swept = 0

    async def run_once(self) -> object:
        return await self.sweep_once()

    async def sweep_once(self) -> int:
        await self.end_stalled_sessions()
        due = await self.engine.steps.sweep_expired()
        for run_id, step_no in due:
            await self.sender.next_step(run_id, step_no)  # the sweep statement enqueued it with jobs_in_db
        if due:
            log.info("sweeper re-enqueued %d step(s)", len(due))
        woken = await self.wake_due() if self.wake_due is not None else 0
        if woken:
            log.info("sweeper woke %d parked run(s) past their deadline", woken)
        self.swept += len(due)
        metrics().sweeper_action("requeued", len(due))
        metrics().sweeper_action("woken", woken)
        return len(due) + woken

    async def end_stalled_sessions(self) -> int:
        """First free what a frozen process holds (store/stalled.py), so that the sweep and the
        workers it re-enqueues for do not wait on it. A failure here never stops the sweep."""
        try:
            stalled = await self.engine.steps.end_stalled_sessions()
        except Exception as exc:
            log.warning("sweeper could not check for stalled sessions: %s", exc)
            return 0
        for s in stalled:
            log.warning("sweeper %s session %d (%s): its client stalled %.1f s inside a transaction, holding"
                        " locks others wait on; last statement: %s", "ended" if s.ended else "could not end",
                        s.pid, s.application_name or "no application_name", s.waited_s, s.query)
        ended = sum(1 for s in stalled if s.ended)
        metrics().sweeper_action("ended_stalled", ended)
        return ended

