"""The sidecar's Postgres job queue: SKIP LOCKED claims, delayed jobs, stale jobs, LISTEN/NOTIFY,
the worker pool end to end, and the sweeper of expired leases. Each test gets its own database so
no other test's workers can take its jobs."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from treadle.dispatch.postgres import PostgresQueue
from treadle.domain.runs import NewEvent, StepMessage
from treadle.engine.workers import Sweeper, WorkerPool
from treadle.store.db import Pool, open_pool
from treadle.store.runs import NewRun, RunStore
from treadle.store.steps import StepOutcome, StepStore
from treadle.testing import age_run, until, user_text

TOOL_CALLER = {"model": "tool-caller", "tools": ["Memory"], "mock": {"tool_calls": 3}}


@dataclass
class QueueEnv:
    url: str
    pool: Pool
    runs: RunStore
    steps: StepStore
    queue: PostgresQueue

    async def create(self, text: str = "hi", *, jobs: bool = True) -> str:
        store = self.runs if jobs else RunStore(self.pool, jobs_in_db=False, requeue_after_s=60.0)
        run, _ = await store.create(NewRun(tenant_id="default", agent="a", segments=user_text(text)))
        return run.id

    async def jobs(self) -> list[tuple[str, int]]:
        async with self.pool.connection() as conn:
            cur = await conn.execute("SELECT run_id, step_no FROM jobs ORDER BY id")
            return [(r["run_id"], r["step_no"]) for r in await cur.fetchall()]

    async def sql(self, query: str, *params: Any) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(query, params)


@pytest.fixture
async def env(migrated_db_url: str) -> AsyncIterator[QueueEnv]:
    pool = await open_pool(migrated_db_url, 12, name="test-queue")
    queue = PostgresQueue(pool, migrated_db_url)
    try:
        yield QueueEnv(
            migrated_db_url,
            pool,
            RunStore(pool, jobs_in_db=True, requeue_after_s=60.0),
            StepStore(pool, jobs_in_db=True, lease_s=30.0, requeue_after_s=60.0),
            queue,
        )
    finally:
        await queue.stop_listening()
        await pool.close()


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 15.0) -> None:
    await until(check, timeout, interval=0.05)


async def test_creating_a_run_enqueues_its_first_step(env: QueueEnv) -> None:
    run_id = await env.create()
    assert await env.jobs() == [(run_id, 0)]
    assert await env.queue.pending() == 1
    due = await env.queue.next_due_in()
    assert due is not None and due == 0.0


async def test_claim_leases_the_run_and_consumes_the_job(env: QueueEnv) -> None:
    run_id = await env.create("payload")
    found, leased = await env.steps.claim_job("w1")
    assert found and leased is not None
    assert (leased.run_id, leased.step_no, leased.status, leased.last_seq) == (run_id, 0, "running", 2)
    assert [e[:2] for e in leased.events] == [(1, "user_input"), (2, "started")]
    assert await env.jobs() == []
    assert await env.steps.claim_job("w2") == (False, None)  # nothing left
    async with env.pool.connection() as conn:
        cur = await conn.execute("SELECT status, lease_owner, lease_until > now() AS live FROM runs WHERE id = %s",
                                 (run_id,))
        row = await cur.fetchone()
    assert row == {"status": "running", "lease_owner": "w1", "live": True}


async def test_concurrent_claimers_get_distinct_jobs(env: QueueEnv) -> None:
    run_ids = {await env.create(f"run {i}") for i in range(8)}
    results = await asyncio.gather(*(env.steps.claim_job(f"worker-{i}") for i in range(11)))
    leased = [lr for _found, lr in results if lr is not None]
    assert len(leased) == 8
    assert {lr.run_id for lr in leased} == run_ids  # each run claimed exactly once
    assert sum(1 for found, _ in results if not found) == 3
    assert await env.jobs() == []
    async with env.pool.connection() as conn:
        cur = await conn.execute("SELECT count(DISTINCT lease_owner) AS n FROM runs")
        assert (await cur.fetchone())["n"] == 8  # type: ignore[index]


async def test_claims_while_jobs_are_locked_skip_them(env: QueueEnv) -> None:
    """A job locked by an open transaction is skipped, not waited for."""
    a = await env.create("a")
    b = await env.create("b")
    async with env.pool.connection() as conn, conn.transaction():
        await conn.execute("SELECT id FROM jobs WHERE run_id = %s FOR UPDATE", (a,))
        found, leased = await asyncio.wait_for(env.steps.claim_job("w"), 5)
        assert found and leased is not None and leased.run_id == b
        assert await asyncio.wait_for(env.steps.claim_job("w2"), 5) == (False, None)
    found, leased = await env.steps.claim_job("w3")
    assert leased is not None and leased.run_id == a


async def test_a_delayed_job_is_not_claimed_early(env: QueueEnv) -> None:
    run_id = await env.create(jobs=False)
    await env.queue.enqueue(StepMessage(run_id, 0), delay_s=30)
    assert await env.jobs() == [(run_id, 0)]
    assert await env.steps.claim_job("w") == (False, None)
    due = await env.queue.next_due_in()
    assert due is not None and 25 < due <= 30
    assert await env.jobs() == [(run_id, 0)]  # still there, untouched
    await age_run(env.pool, run_id, 31)  # time passes
    found, leased = await env.steps.claim_job("w")
    assert found and leased is not None and leased.run_id == run_id


async def test_a_short_delay_becomes_due(env: QueueEnv) -> None:
    run_id = await env.create(jobs=False)
    await env.queue.enqueue(StepMessage(run_id, 0), delay_s=0.3)
    assert await env.steps.claim_job("w") == (False, None)
    await age_run(env.pool, run_id, 0.3)  # the delay passes
    _found, leased = await env.steps.claim_job("w")
    assert leased is not None and leased.run_id == run_id


async def test_jobs_are_claimed_in_due_order(env: QueueEnv) -> None:
    first = await env.create("1", jobs=False)
    second = await env.create("2", jobs=False)
    await env.queue.enqueue(StepMessage(second, 0), delay_s=0)
    await env.queue.enqueue(StepMessage(first, 0), delay_s=0)
    await env.sql("UPDATE jobs SET run_at = now() - interval '10 seconds' WHERE run_id = %s", first)
    _, a = await env.steps.claim_job("w")
    _, b = await env.steps.claim_job("w")
    assert (a.run_id if a else None, b.run_id if b else None) == (first, second)


async def test_a_stale_job_is_consumed_and_dropped(env: QueueEnv) -> None:
    run_id = await env.create()
    _found, leased = await env.steps.claim_job("w1")
    assert leased is not None
    # a duplicate of the same step while the lease is live
    await env.queue.enqueue(StepMessage(run_id, 0))
    assert await env.steps.claim_job("w2") == (True, None)
    assert await env.jobs() == []
    # the step commits (step_no 0 -> 1); an old message for step 0 is now stale
    committed = await env.steps.commit(leased, "w1", [NewEvent("text", {"text": "x", "iteration": 1})],
                                       StepOutcome("running", enqueue_next=True))
    assert committed.step_no == 1
    assert await env.jobs() == [(run_id, 1)]
    await env.queue.enqueue(StepMessage(run_id, 0))
    _found, fresh = await env.steps.claim_job("w3")  # due order: the step-1 job first
    assert fresh is not None and fresh.step_no == 1
    assert await env.steps.claim_job("w4") == (True, None)  # the stale step-0 job
    assert await env.jobs() == []
    async with env.pool.connection() as conn:
        cur = await conn.execute("SELECT lease_owner, step_no FROM runs WHERE id = %s", (run_id,))
        assert await cur.fetchone() == {"lease_owner": "w3", "step_no": 1}


async def test_a_job_for_a_finished_run_is_dropped(env: QueueEnv) -> None:
    run_id = await env.create()
    await env.sql("UPDATE runs SET status = 'completed' WHERE id = %s", run_id)
    assert await env.steps.claim_job("w") == (True, None)
    assert await env.jobs() == []


async def test_listen_notify_wakes_a_waiter_when_a_job_is_inserted(env: QueueEnv) -> None:
    env.queue.start_listening()
    await asyncio.wait_for(env.queue.wakeup.wait(), 10)  # set once LISTEN is in place
    env.queue.wakeup.clear()
    await asyncio.sleep(0.2)
    assert not env.queue.wakeup.is_set()  # no spurious wake-ups

    # a job inserted by another connection (RunStore.create notifies in the same statement)
    other = await open_pool(env.url, 1, name="test-queue-other")
    try:
        await RunStore(other, jobs_in_db=True, requeue_after_s=60).create(
            NewRun(tenant_id="default", agent="a", segments=user_text("wake"))
        )
    finally:
        await other.close()
    started = time.monotonic()
    await asyncio.wait_for(env.queue.wakeup.wait(), 5)
    assert time.monotonic() - started < 5

    env.queue.wakeup.clear()
    run_id = await env.create(jobs=False)
    await env.queue.enqueue(StepMessage(run_id, 0))
    await asyncio.wait_for(env.queue.wakeup.wait(), 5)


@pytest.fixture
async def pg_runtime(migrated_db_url: str, open_runtime: Any) -> Any:  # the runtime closes before the drop
    async def factory(agents: dict[str, Any], **settings: Any) -> Any:
        rt, queue = await open_runtime(agents, inline=False, url=migrated_db_url, **settings)
        assert isinstance(queue, PostgresQueue)
        return rt, queue

    return factory


async def wait_terminal(rt: Any, run_ids: list[str], timeout: float = 20.0) -> None:
    async def done() -> bool:
        for rid in run_ids:
            run = await rt.runs.get("default", rid)
            if run is None or not run.terminal:
                return False
        return True

    await eventually(done, timeout)


async def test_worker_pool_completes_runs_end_to_end(pg_runtime: Any) -> None:
    rt, queue = await pg_runtime({"a": TOOL_CALLER, "e": {"model": "echo"}})
    workers = WorkerPool(rt.engine, queue, 3, idle_poll_s=5.0)  # long poll: wake-ups must come by NOTIFY
    workers.start()
    try:
        ids = [(await rt.start_run(NewRun(tenant_id="default", agent="a", segments=user_text(f"r{i}"))))[0].id
               for i in range(5)]
        echo = (await rt.start_run(NewRun(tenant_id="default", agent="e", segments=user_text("say this"))))[0].id
        await wait_terminal(rt, [*ids, echo])
    finally:
        await workers.stop()
    for rid in ids:
        run = await rt.runs.get("default", rid)
        assert (run.status, run.stop_reason, run.iterations) == ("completed", "end_turn", 4)
        events = await rt.runs.events("default", rid)
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        calls = [e.payload["tool_use"]["id"] for e in events if e.type == "tool_call"]
        results = [e.payload["tool_use"]["id"] for e in events if e.type == "tool_result"]
        assert len(calls) == 3 and calls == results
        assert events[-1].type == "done"
    echo_events = await rt.runs.events("default", echo)
    assert [e.payload["text"] for e in echo_events if e.type == "text"] == ["say this"]
    # one claim per job taken; a claim may run several steps back to back (chaining)
    assert len(ids) + 1 <= workers.steps_run <= 5 * 4 + 1
    assert [(await rt.runs.get("default", rid)).step_no for rid in [*ids, echo]] == [4] * 5 + [1]
    assert await queue.pending() == 0
    # the shared agent-scope counter saw every tool call exactly once
    found, value = await rt.memory.get("default", "agent", "a", "calls")
    assert found and value == 15


async def test_sweeper_reenqueues_a_run_whose_lease_expired(pg_runtime: Any) -> None:
    rt, queue = await pg_runtime({"a": TOOL_CALLER})
    run_id = (await rt.start_run(NewRun(tenant_id="default", agent="a", segments=user_text("x"))))[0].id
    live_id = (await rt.start_run(NewRun(tenant_id="default", agent="a", segments=user_text("y"))))[0].id
    # two workers claim the runs; the first "dies" mid-step after recording its assistant turn
    owners = {}
    for _ in range(2):
        owner = rt.engine.new_owner()
        _found, leased = await rt.steps.claim_job(owner)
        assert leased is not None
        owners[leased.run_id] = (owner, leased)
    dead_owner, dead = owners[run_id]
    tu = {"id": "toolu_dead", "name": "Memory", "input": {"op": "incr", "scope": "agent", "key": "calls"}}
    await rt.steps.append(dead, dead_owner, [NewEvent("tool_call", {"tool_use": tu, "iteration": 1}),
                                             NewEvent("usage", {"usage": {}, "iteration": 1})])
    async with rt.pool.connection() as conn:
        await conn.execute("UPDATE runs SET lease_until = now() - interval '1 second' WHERE id = %s", (run_id,))
    assert await queue.pending() == 0

    sweeper = Sweeper(rt.engine, queue, interval_s=60)
    assert await sweeper.sweep_once() == 1  # only the expired one, not the live lease
    assert sweeper.swept == 1
    async with rt.pool.connection() as conn:
        cur = await conn.execute("SELECT run_id, step_no FROM jobs")
        assert await cur.fetchall() == [{"run_id": run_id, "step_no": 0}]
        cur = await conn.execute("SELECT lease_owner, lease_until > now() AS later FROM runs WHERE id = %s",
                                 (run_id,))
        assert await cur.fetchone() == {"lease_owner": None, "later": True}
    assert await sweeper.sweep_once() == 0  # swept once, not again until its new deadline

    # the dead worker's late writes are fenced off
    from treadle.errors import LeaseLost

    with pytest.raises(LeaseLost):
        await rt.steps.append(dead, dead_owner, [NewEvent("text", {"text": "zombie", "iteration": 1})])

    # the live run's worker finishes its step normally; then workers drive both runs to the end
    live_owner, live = owners[live_id]
    await rt.engine.run_leased(live, live_owner)
    workers = WorkerPool(rt.engine, queue, 2, idle_poll_s=0.2)
    workers.start()
    try:
        await wait_terminal(rt, [run_id, live_id])
    finally:
        await workers.stop()
    events = await rt.runs.events("default", run_id)
    results = [e for e in events if e.type == "tool_result"]
    assert results[0].payload["tool_use"]["id"] == "toolu_dead"  # resumed: only the unanswered tool ran
    assert not any(e.type == "text" and e.payload.get("text") == "zombie" for e in events)
    calls = [e.payload["tool_use"]["id"] for e in events if e.type == "tool_call"]
    assert calls == [e.payload["tool_use"]["id"] for e in results]
    run = await rt.runs.get("default", run_id)
    assert (run.status, run.iterations) == ("completed", 4)
