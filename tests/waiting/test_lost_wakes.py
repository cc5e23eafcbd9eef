"""A stored fact that should wake a run wakes it even when the process dies between the fact's
commit and its poke (store/waits.py, durable pokes): each test stores the fact exactly as its
route does and then skips the poke — the process died there — and one sweeper pass wakes the run.
A retried application-tool answer that finds its row stored wakes the run at once instead of 409.
(Child completions: tests/waiting/test_subagents.py, `test_a_lost_wake_up_is_found_by_the_sweeper`.)"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from tests.support.waiting import asker, start, status
from tests.waiting.test_client_tools import SHOPPER, client_for, events
from tests.waiting.test_client_tools import start as start_shopper
from treadle.engine.waiting import input_key
from treadle.store.channels import ChannelDef
from treadle.store.clienttools import client_tool_key
from treadle.store.inputs import InputStore
from treadle.store.interrupts import InterruptStore
from treadle.testing import sweep


async def due_pokes(rt: Any, key: str = "%") -> int:
    """The durable pokes not done yet (other tests on this database may leave some: no sweep counts)."""
    async with rt.pool.connection() as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM wait_timers WHERE due_at <= now() AND key LIKE %s",
                                 (key,))
        row = await cur.fetchone()
    return int(row["n"])


async def parked(rt: Any, disp: Any, run_id: str) -> None:
    await disp.drain()
    assert await status(rt, run_id) == "waiting"
    await sweep(rt)
    await disp.drain()
    assert await status(rt, run_id) == "waiting"  # nothing wakes it while no fact is stored


async def woken_by_the_sweeper(rt: Any, disp: Any, run_id: str) -> None:
    assert await status(rt, run_id) == "waiting"  # the poke was lost with the process
    assert await due_pokes(rt) >= 1
    assert await sweep(rt) >= 1
    await disp.drain()
    assert await status(rt, run_id) == "completed"


async def pending_call(c: Any, run_id: str) -> str:
    [pending] = [e for e in await events(c, run_id) if e["type"] == "tool_pending"]
    return str(pending["tool_use"]["id"])


@asynccontextmanager
async def shopper_answered_then_died(open_runtime: Any) -> AsyncIterator[tuple[Any, Any, Any, str, str]]:
    """A shopper run parked on its application tool, whose answer "shipped" is stored and never
    poked (the process died): (runtime, dispatcher, client, run id, tool_use id)."""
    rt, disp = await open_runtime({"shopper": SHOPPER})
    async with client_for(rt) as c:
        run_id = await start_shopper(c)
        await parked(rt, disp, run_id)
        tu = await pending_call(c, run_id)
        await rt.engine.tools.client_results.answer("default", run_id, tu, "shipped", False)  # commit, then death
        yield rt, disp, c, run_id, tu


async def asker_answered_then_died(open_runtime: Any) -> tuple[Any, Any, str, str]:
    """An asker run parked on its question, whose answer "yes" is stored and never poked (the
    process died): (runtime, dispatcher, run id, interrupt id)."""
    rt, disp = await open_runtime({"a": asker()})
    run_id = await start(rt, "a")
    await parked(rt, disp, run_id)
    store = InterruptStore(rt.pool)
    [pending] = await store.list_for_run("default", run_id, "pending")
    assert await store.resolve("default", run_id, pending.id, answer="yes", status="resolved",
                               resolved_by="api") is not None  # commit, then death
    return rt, disp, run_id, pending.id


async def test_an_application_tool_answer_whose_poke_was_lost(open_runtime: Any) -> None:
    async with shopper_answered_then_died(open_runtime) as (rt, disp, c, run_id, tu):
        assert await due_pokes(rt, client_tool_key(run_id, tu)) == 1
        await woken_by_the_sweeper(rt, disp, run_id)
        assert await due_pokes(rt, client_tool_key(run_id, tu)) == 0
        [result] = [e for e in await events(c, run_id) if e["type"] == "tool_result"]
        assert result["text"] == "shipped"


async def test_a_retried_answer_wakes_the_run_at_once(open_runtime: Any) -> None:
    async with shopper_answered_then_died(open_runtime) as (rt, disp, c, run_id, tu):
        other = await c.post(f"/v1/runs/{run_id}/tool_results", json={"tool_use_id": tu, "content": "lost"})
        assert (other.status_code, other.json()["code"]) == (409, "tool_call_not_waiting")  # a different answer
        retry = await c.post(f"/v1/runs/{run_id}/tool_results", json={"tool_use_id": tu, "content": "shipped"})
        assert (retry.status_code, retry.json()["woke"]) == (200, 1), retry.text
        await disp.drain()
        assert await status(rt, run_id) == "completed"
        assert await due_pokes(rt, client_tool_key(run_id, tu)) == 0  # the route's poke did the due one
        again = await c.post(f"/v1/runs/{run_id}/tool_results", json={"tool_use_id": tu, "content": "shipped"})
        assert (again.status_code, again.json()["code"]) == (409, "tool_call_not_waiting")  # the run took it


async def test_an_interrupt_answer_whose_poke_was_lost(open_runtime: Any) -> None:
    rt, disp, run_id, _ = await asker_answered_then_died(open_runtime)
    await woken_by_the_sweeper(rt, disp, run_id)


async def test_an_input_whose_poke_was_lost(open_runtime: Any) -> None:
    rt, disp = await open_runtime({"chat": {"model": "echo"}})
    run_id = await start(rt, "chat", "one", interactive=True)
    await parked(rt, disp, run_id)
    queued = await InputStore(rt.pool).add("default", run_id, "input", "two")
    assert queued.input_id is not None
    assert await sweep(rt) >= 1
    await disp.drain()
    assert await status(rt, run_id) == "waiting"  # answered "two", parked for input again
    texts = [e.payload["text"] for e in await rt.runs.events("default", run_id) if e.type == "text"]
    assert texts == ["one", "two"]
    assert input_key(run_id) == f"input:{run_id}"  # the key store/inputs.py records


async def test_a_channel_publish_whose_poke_was_lost(open_runtime: Any) -> None:
    script = [{"tool": "Channel", "input": {"op": "subscribe", "channel": "news", "wait_ms": 600_000}},
              {"text": "got it"}]
    rt, disp = await open_runtime({"l": {"model": "script", "tools": ["Channel"], "mock": {"script": script}}})
    d = rt.channels.declared["news"] = ChannelDef("news", semantic="broadcast", source="yaml")
    run_id = await start(rt, "l")
    await parked(rt, disp, run_id)
    await rt.channels.publish("default", d, "", {"headline": "hello"}, None)  # what rt.publish (HTTP, webhooks) stores
    await woken_by_the_sweeper(rt, disp, run_id)


async def test_a_retried_interrupt_answer_wakes_the_run_at_once(open_runtime: Any) -> None:
    rt, disp, run_id, interrupt_id = await asker_answered_then_died(open_runtime)
    async with client_for(rt) as c:
        url = f"/v1/runs/{run_id}/interrupts/{interrupt_id}/resolve"
        other = await c.post(url, json={"disposition": "answer", "answer": "no"})
        assert (other.status_code, other.json()["code"]) == (409, "interrupt_settled")  # a different answer
        retry = await c.post(url, json={"disposition": "answer", "answer": "yes"})
        assert (retry.status_code, retry.json()["status"]) == (200, "resolved"), retry.text
        await disp.drain()
        assert await status(rt, run_id) == "completed"
        again = await c.post(url, json={"disposition": "answer", "answer": "yes"})
        assert (again.status_code, again.json()["code"]) == (409, "interrupt_settled")  # the run took it
