"""A cancel that lands in the same loop turn as the wake-up it waits for is not lost.

On Python 3.11 `asyncio.wait_for` returns the inner result instead of raising when the cancel and
the completion race, so the caller goes on as if never cancelled. The idle worker waited so:
`WorkerPool.stop` then waited for ever on a worker that went on polling (seen as a hang of
scripts/bench_cancel.py when a job NOTIFY raced the stop). engine/hub.py `wait_event` is the
replacement; these tests fail with `asyncio.wait_for` in its place (checked)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

from treadle.domain.tasks import cancel_all_and_wait, cancel_and_wait
from treadle.engine.hub import LiveSubscription, RunEventHub
from treadle.engine.workers import WorkerPool


async def until_waiting(task: asyncio.Task[Any]) -> None:
    """Let `task` run until it is parked on something (a few loop turns, no time)."""
    for _ in range(10):
        await asyncio.sleep(0)


def stub_pool(claim_job: Callable[[str], Awaitable[tuple[bool, None]]], *,
              idle_poll_s: float) -> tuple[WorkerPool, asyncio.Event]:
    """A one-worker pool whose jobs are claimed by `claim_job`, and its queue's wakeup event."""
    steps = SimpleNamespace(claim_job=claim_job, holding=contextlib.nullcontext)
    engine = SimpleNamespace(new_owner=lambda: "o", steps=steps)
    queue = SimpleNamespace(wakeup=asyncio.Event())
    # stand-ins for the Engine and the job queue: the worker loop touches only these attributes
    pool = WorkerPool(engine, queue, 1, idle_poll_s=idle_poll_s)  # type: ignore[arg-type]
    return pool, queue.wakeup


async def test_an_idle_worker_stops_when_stopped_as_a_job_wakes_it() -> None:
    async def claim_job(owner: str) -> tuple[bool, None]:
        return False, None

    pool, wakeup = stub_pool(claim_job, idle_poll_s=30.0)
    worker = asyncio.create_task(pool._work(0))
    await until_waiting(worker)
    wakeup.set()  # a job NOTIFY...
    worker.cancel()  # ...and the stop, in the same turn
    done, _ = await asyncio.wait({worker}, timeout=5)
    assert worker in done and worker.cancelled()


async def test_a_run_waiter_cancelled_as_it_is_poked_is_cancelled() -> None:
    hub = RunEventHub()
    waiter = asyncio.create_task(hub.wait("r1", 30.0))
    await until_waiting(waiter)
    hub.notify("r1")
    waiter.cancel()
    done, _ = await asyncio.wait({waiter}, timeout=5)
    assert waiter in done and waiter.cancelled()


async def test_a_live_reader_cancelled_as_a_frame_arrives_is_cancelled() -> None:
    sub = LiveSubscription()
    reader = asyncio.create_task(sub.wait(30.0))
    await until_waiting(reader)
    sub.poke()
    reader.cancel()
    done, _ = await asyncio.wait({reader}, timeout=5)
    assert reader in done and reader.cancelled()


async def test_a_wait_that_times_out_or_is_woken_returns() -> None:
    hub = RunEventHub()
    assert await hub.wait("r2", 0.01) is False
    woken = asyncio.create_task(hub.wait("r3", 30.0))
    await until_waiting(woken)
    hub.notify("r3")
    assert await woken is True


async def test_a_caller_cancelled_while_it_ends_a_helper_is_cancelled() -> None:
    """`cancel_and_wait` (domain/tasks.py): the helper's own CancelledError is swallowed, a cancel of
    the caller that lands meanwhile is not (with `suppress(CancelledError)` it was)."""
    release = asyncio.Event()

    async def slow_to_end() -> None:
        try:
            await asyncio.sleep(30)
        finally:
            await release.wait()  # like a query being cancelled on the server

    async def caller(helper: asyncio.Task[None]) -> str:
        await cancel_and_wait(helper)
        return "went on"

    helper = asyncio.create_task(slow_to_end())
    await until_waiting(helper)
    ending = asyncio.create_task(caller(helper))
    await until_waiting(ending)
    ending.cancel()  # e.g. WorkerPool.stop while the step's watch ends its poll task
    release.set()
    done, _ = await asyncio.wait({ending}, timeout=5)
    assert ending in done and ending.cancelled()

    quiet = asyncio.create_task(asyncio.sleep(30))
    await until_waiting(quiet)
    assert await caller(quiet) == "went on"  # only the helper was cancelled
    assert quiet.cancelled()


async def test_a_worker_stops_even_when_a_call_below_it_swallows_the_stop() -> None:
    started = asyncio.Event()

    async def claim_job(owner: str) -> tuple[bool, None]:
        if not started.is_set():
            started.set()
            with contextlib.suppress(asyncio.CancelledError):  # a library that cleans up and returns
                await asyncio.sleep(30)
        return False, None

    # it stops within one idle poll (0.5 s by default) of the swallowed stop
    pool, _ = stub_pool(claim_job, idle_poll_s=0.05)
    worker = asyncio.create_task(pool._work(0))
    await started.wait()
    worker.cancel()
    done, _ = await asyncio.wait({worker}, timeout=5)
    assert worker in done and worker.cancelled()


async def test_cancelling_many_tasks_cancels_each_once_so_their_clean_up_runs_to_its_end() -> None:
    """`cancel_all_and_wait` (WorkerPool.stop): each task is cancelled once. Cancelling them all,
    then `cancel_and_wait` on each, cancelled a task again inside its clean-up of the first cancel
    — a worker cancelling its query on the server gave up and closed its connection."""
    cleaned: list[int] = []
    in_clean_up = [asyncio.Event() for _ in range(3)]
    release = [asyncio.Event() for _ in range(3)]

    async def worker(i: int) -> None:
        try:
            await asyncio.sleep(30)
        finally:
            in_clean_up[i].set()
            await release[i].wait()  # like psycopg cancelling the running query on the server
            cleaned.append(i)

    tasks = [asyncio.create_task(worker(i)) for i in range(3)]
    for t in tasks:
        await until_waiting(t)

    async def release_in_turn() -> None:  # each clean-up ends after the one before it
        await asyncio.gather(*(e.wait() for e in in_clean_up))
        for i, t in enumerate(tasks):
            release[i].set()
            await asyncio.wait({t})

    releaser = asyncio.create_task(release_in_turn())
    await cancel_all_and_wait(tasks)
    await asyncio.wait_for(releaser, 5)
    assert sorted(cleaned) == [0, 1, 2]
    assert all(t.cancelled() for t in tasks)
