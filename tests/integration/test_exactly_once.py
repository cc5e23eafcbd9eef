"""Transactional tools apply their effects exactly once: a crash between a tool's write and the
step's commit, a worker that stalled past its lease, and a tool that fails half-way all leave
the database as if the call had run once (or, for the failure, not at all)."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import pytest

from tests.support.tally import Crash, Tally
from treadle.dispatch.inline import InlineDispatcher
from treadle.domain.runs import StepMessage
from treadle.engine.outcomes import StepResult
from treadle.engine.step import MAX_STEP_FAILURES
from treadle.providers.base import ModelRequest, ModelResponse
from treadle.providers.mock import MockProvider
from treadle.runtime import Runtime
from treadle.store.runs import NewRun
from treadle.testing import expire_lease, open_test_runtime, sweep, user_text

TENANT = f"t_once_{secrets.token_hex(4)}"  # Memory is per tenant: each test below uses its own agent


class GatedMock(MockProvider):
    """The mock provider; its first call waits until the test opens the gate (a stalled worker)."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.gate = asyncio.Event()
        self.calls = 0

    async def call(self, req: ModelRequest, on_delta: Any = None) -> ModelResponse:
        self.calls += 1
        if self.calls == 1:
            self.entered.set()
            await self.gate.wait()
        return await super().call(req, on_delta)


AGENT = {"model": "script", "tools": ["Tally"],
         "mock": {"script": [{"tool": "Tally", "input": {}}, {"text": "done"}]}}
AGENTS = {name: AGENT for name in ("crashes", "stalls", "fails")}


@pytest.fixture
async def harness(db_url: str, tmp_path: Any) -> AsyncIterator[Any]:
    async with AsyncExitStack() as stack:

        async def open_rt(tool: Tally, provider: MockProvider | None = None) -> tuple[Runtime, InlineDispatcher]:
            return await stack.enter_async_context(open_test_runtime(
                AGENTS, database_url=db_url, tools=[tool], providers={"mock": provider} if provider else None,
                home=tmp_path, workers=1,
            ))

        yield open_rt


async def start(rt: Runtime, agent: str) -> str:
    run, _ = await rt.start_run(NewRun(tenant_id=TENANT, agent=agent, segments=user_text("count")))
    return run.id


async def test_a_crash_between_the_write_and_the_commit_applies_the_effect_once(harness: Any) -> None:
    tool = Tally(crash_at={1})
    rt, disp = await harness(tool)
    run_id = await start(rt, "crashes")
    with pytest.raises(Crash):
        await disp.drain()
    assert tool.invocations == 1
    assert await Tally.count(rt, TENANT, "crashes") is None  # the write rolled back with the step that never committed

    assert await expire_lease(rt, run_id)
    await sweep(rt)
    await disp.drain()
    run = await rt.runs.get(TENANT, run_id)
    assert run is not None and run.status == "completed"
    assert tool.invocations == 2
    assert await Tally.count(rt, TENANT, "crashes") == 1
    results = [e.payload for e in await rt.runs.events(TENANT, run_id) if e.type == "tool_result"]
    assert [r["text"] for r in results] == ['{"tally":1}']  # the transcript and the effect agree


async def test_a_worker_that_stalled_past_its_lease_writes_nothing(harness: Any) -> None:
    tool = Tally()
    provider = GatedMock()
    rt, disp = await harness(tool, provider)
    run_id = await start(rt, "stalls")
    [first] = disp.queue
    disp.queue.clear()
    stalled = asyncio.create_task(rt.engine.handle(first))
    await provider.entered.wait()  # worker A is inside its model call

    assert await expire_lease(rt, run_id)  # A was presumed dead and swept
    assert await rt.engine.handle(first) is StepResult.CONTINUED  # worker B runs the same step
    await disp.drain()
    provider.gate.set()
    assert await stalled is StepResult.LEASE_LOST  # A wakes up: its commit is refused, with its effects

    run = await rt.runs.get(TENANT, run_id)
    assert run is not None and run.status == "completed"
    # both workers ran the tool; only the one that held the step committed its write
    assert tool.invocations == 2 and await Tally.count(rt, TENANT, "stalls") == 1
    events = await rt.runs.events(TENANT, run_id)
    assert [e.type for e in events].count("tool_result") == 1
    assert [e.seq for e in events] == list(range(1, len(events) + 1))  # no gap, no duplicate


async def test_a_tool_that_fails_after_writing_leaves_no_write(harness: Any) -> None:
    tool = Tally(fail_at={1})
    rt, disp = await harness(tool)
    run_id = await start(rt, "fails")
    await disp.drain()
    results = [e.payload for e in await rt.runs.events(TENANT, run_id) if e.type == "tool_result"]
    assert [(r["is_error"], r["text"]) for r in results] == [(True, "Tally: failed after writing")]
    assert await Tally.count(rt, TENANT, "fails") is None  # rolled back to the savepoint before the call


async def test_a_step_that_keeps_crashing_backs_off_then_fails_the_run(harness: Any) -> None:
    """Invariant 8: a step that raises (here its commit: a database hiccup) hands its lease back
    with exponential backoff (0.5 s, 1 s, 2 s, 4 s) and the run keeps going; the 5th failure in a
    row ends the run `internal_error`, naming the last error."""
    rt, disp = await harness(Tally())
    run_id = await start(rt, "crashes")
    real_commit = rt.steps.commit
    hiccups = 0

    async def flaky_commit(*args: Any, **kwargs: Any) -> Any:
        nonlocal hiccups
        if hiccups < MAX_STEP_FAILURES:
            hiccups += 1
            raise RuntimeError(f"database hiccup {hiccups}")
        return await real_commit(*args, **kwargs)

    rt.steps.commit = flaky_commit  # the fault, on this runtime only
    backoffs: list[float] = []
    for attempt in range(1, MAX_STEP_FAILURES + 1):
        await disp.drain()
        assert hiccups == attempt
        async with rt.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT status, lease_owner, step_failures,"
                " extract(epoch FROM lease_until - updated_at)::float8 AS backoff FROM runs WHERE id = %s",
                (run_id,))
            row = await cur.fetchone()
        assert row is not None
        if attempt < MAX_STEP_FAILURES:  # handed back, to be retried after the backoff
            assert (row["status"], row["lease_owner"], row["step_failures"]) == ("running", None, attempt), row
            backoffs.append(round(row["backoff"], 2))
            assert await expire_lease(rt, run_id)  # the backoff has passed
            [(swept, step_no)] = await rt.steps.sweep_expired()
            assert swept == run_id
            await disp.enqueue(StepMessage(run_id, step_no))
    assert backoffs == [0.5, 1.0, 2.0, 4.0]
    run = await rt.runs.get(TENANT, run_id)
    assert run is not None and run.status == "failed" and run.error is not None
    assert run.error["code"] == "internal_error"
    assert f"step failed {MAX_STEP_FAILURES} times" in run.error["error"]
    assert "database hiccup 5" in run.error["error"]
