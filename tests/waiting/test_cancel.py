"""A cancel stops work at once and is never lost: it aborts an in-flight model call or external
tool (heard over LISTEN/NOTIFY in the sidecar, by polling in the cloud shape), and whenever it
lands the API's answer and the run's end agree."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from tests.support.waiting import ECHO, events, start, status, tool_results, types
from treadle.builtins.registry import default_registry
from treadle.config import Settings, parse_config
from treadle.dispatch.inline import InlineDispatcher
from treadle.runtime import Runtime
from treadle.store.inputs import InputStore
from treadle.store.runs import NewRun
from treadle.testing import until, user_text
from treadle.tools.base import Park, ToolContext, ToolEffects, ToolResult

SLOW = {"model": "echo", "mock": {"latency_ms": 60_000}}  # a model call that would take a minute
BOUND_S = 20.0  # a test that waits this long has failed: the work was not aborted


class Fetch:
    """An external tool that waits until the test lets it go (an HTTP call that hangs)."""

    name = "Fetch"
    description = "fetch"
    input_schema: dict[str, Any] = {"type": "object"}
    effects: ToolEffects = "external"

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.aborted = False

    async def invoke(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult | Park:
        self.started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            self.aborted = True
            raise
        return ToolResult("fetched")


async def open_rt(db_url: str, home: Any, agents: dict[str, Any], **settings: Any) -> tuple[Runtime, Any]:
    registry = default_registry()
    fetch = Fetch()
    registry.register(fetch)
    disp = InlineDispatcher()
    rt = await Runtime.open(
        Settings(database_url=db_url, home=home, workers=1, chain_steps=1, **settings),
        parse_config({"agents": agents}), dispatcher_factory=lambda _p, _u: disp, registry=registry,
    )
    disp.handler = rt.engine.handle
    return rt, (disp, fetch)


async def wait_for_lease(rt: Runtime, run_id: str) -> None:
    """Until a worker holds the run's step (polling, 20 s at most)."""

    async def leased() -> bool:
        async with rt.pool.connection() as conn:
            cur = await conn.execute("SELECT lease_owner FROM runs WHERE id = %s", (run_id,))
            row = await cur.fetchone()
        return row is not None and bool(row["lease_owner"])

    await until(leased, 20, what="a worker to lease the step")


@pytest.mark.parametrize("watch", ["notify", "poll"])
async def test_a_cancel_aborts_an_inflight_model_call(db_url: str, tmp_path: Any, watch: str) -> None:
    rt, (disp, _) = await open_rt(db_url, tmp_path, {"slow": SLOW}, cancel_watch=watch, cancel_poll_seconds=0.05)
    try:
        run_id = await start(rt, "slow")
        step = asyncio.create_task(disp.drain())
        await wait_for_lease(rt, run_id)  # the step holds the lease: the model call is (about to be) under way
        await rt.cancel_run("default", run_id, "stop now")
        await asyncio.wait_for(step, BOUND_S)  # the minute-long call was dropped
        assert await status(rt, run_id) == "cancelled"
        done = [e.payload for e in await events(rt, run_id) if e.type == "done"]
        assert [(d["stop_reason"], d["reason"]) for d in done] == [("cancelled", "stop now")]
        assert "text" not in types(await events(rt, run_id))  # the aborted answer is not recorded
    finally:
        await rt.close()


async def test_a_cancel_aborts_an_inflight_external_tool(db_url: str, tmp_path: Any) -> None:
    agent = {"model": "script", "tools": ["Fetch"], "mock": {"script": [{"tool": "Fetch", "input": {}},
                                                                      {"text": "done"}]}}
    rt, (disp, fetch) = await open_rt(db_url, tmp_path, {"fetcher": agent})
    try:
        run_id = await start(rt, "fetcher")
        step = asyncio.create_task(disp.drain())
        await asyncio.wait_for(fetch.started.wait(), BOUND_S)
        await rt.cancel_run("default", run_id, "enough")
        await asyncio.wait_for(step, BOUND_S)
        assert fetch.aborted and await status(rt, run_id) == "cancelled"
        [result] = tool_results(await events(rt, run_id))  # the recorded tool_use is answered
        assert result["is_error"] and "enough" in result["text"]
    finally:
        await rt.close()


async def test_a_turn_cancel_aborts_the_inflight_turn_and_the_run_waits_for_input(db_url: str, tmp_path: Any) -> None:
    rt, (disp, _) = await open_rt(db_url, tmp_path, {"slow": SLOW})
    try:
        new = NewRun(tenant_id="default", agent="slow", segments=user_text("hi"), interactive=True)
        run, _ = await rt.start_run(new)
        step = asyncio.create_task(disp.drain())
        await wait_for_lease(rt, run.id)
        # what POST /v1/runs/{id}/cancel {"scope": "turn"} queues
        await InputStore(rt.pool).add("default", run.id, "turn_cancel", "wrong question")
        await asyncio.wait_for(step, BOUND_S)
        assert await status(rt, run.id) == "waiting"
        kinds = types(await events(rt, run.id))
        assert kinds[-2:] == ["turn_cancelled", "awaiting_input"] and "text" not in kinds
    finally:
        await rt.close()


async def test_a_cancel_before_the_watch_starts_is_not_lost(db_url: str, tmp_path: Any) -> None:
    rt, (disp, _) = await open_rt(db_url, tmp_path, {"echo": ECHO})
    try:
        run_id = await start(rt, "echo")
        [msg] = disp.queue
        disp.queue.clear()
        owner = rt.engine.new_owner()
        leased = await rt.steps.lease(msg.run_id, msg.step_no, owner)  # read: no cancel yet
        assert leased is not None and not leased.cancel_requested
        await rt.cancel_run("default", run_id, "late")  # its notification comes before any watch
        await rt.engine.run_leased(leased, owner)  # the model answers; completing is refused
        await disp.drain()
        assert await status(rt, run_id) == "cancelled"
    finally:
        await rt.close()


async def test_the_answer_and_the_end_agree_wherever_the_cancel_lands(open_runtime: Any) -> None:
    """Runs on the real Postgres queue with four workers, each cancelled at a random moment of its
    life (queued, mid model call, mid tools, mid commit, already finished)."""
    agent = {"model": "tool-caller", "tools": ["Memory"], "mock": {"tool_calls": 2, "latency_ms": 20, "jitter_ms": 20}}
    rt, _ = await open_runtime({"worker": agent}, inline=False, workers=4)
    from treadle.engine.workers import WorkerPool

    pool = WorkerPool(rt.engine, rt.dispatcher, 4)
    pool.start()
    rng = random.Random(7)
    try:
        run_ids = [await start(rt, "worker", f"job {i}") for i in range(24)]

        async def cancel_later(run_id: str) -> bool:
            await asyncio.sleep(rng.uniform(0, 0.25))
            run = await rt.cancel_run("default", run_id, "random")
            assert run is not None
            return not run.terminal or run.status == "cancelled"  # what the API answers

        answers = await asyncio.gather(*(cancel_later(r) for r in run_ids))
        async def all_ended() -> list[str] | None:
            ends = [await status(rt, r) for r in run_ids]
            return ends if all(s in ("completed", "cancelled", "failed") for s in ends) else None

        ends: list[str] = await until(all_ended, 30, what="every run to end")
        assert all(s in ("completed", "cancelled") for s in ends), ends
        for run_id, promised, end in zip(run_ids, answers, ends, strict=True):
            assert (end == "cancelled") == promised, (run_id, promised, end)
        assert "cancelled" in ends  # the random moments did land mid-run
    finally:
        await pool.stop()
