"""Interactive runs and steering: park at end_turn, take input, answer, park again; input lands at
the top of an iteration, never between a tool_use and its tool_result; a turn cancel re-parks."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from tests.support.waiting import ECHO, answer, asker, events, spawner, start, status, tool_results, types
from tests.support.waits import GatedProvider
from treadle.domain.content import ToolResultBlock
from treadle.engine.replay import replay
from treadle.engine.waiting import input_key
from treadle.store.inputs import InputStore
from treadle.store.interrupts import InterruptStore


async def steer(rt: Any, run_id: str, text: str, kind: str = "input") -> int:
    """What POST /v1/runs/{id}/input does: queue, then poke the run's input key."""
    queued = await InputStore(rt.pool).add("default", run_id, kind, text)
    assert queued.input_id is not None, queued
    return int(await rt.poke("default", [input_key(run_id)]))


async def test_interactive_run_parks_takes_input_answers_and_parks_again(open_runtime: Any) -> None:
    rt, disp = await open_runtime({"chat": ECHO})
    run_id = await start(rt, "chat", "hello", interactive=True)
    await disp.drain()
    run = await rt.runs.get("default", run_id)
    assert run.status == "waiting" and run.lease_owner is None and run.stop_reason is None
    assert disp.queue == []
    evs = await events(rt, run_id)
    assert types(evs) == ["user_input", "started", "text", "usage", "awaiting_input"]
    assert evs[-1].payload == {"since_turn": 1}

    assert await steer(rt, run_id, "second question") == 1
    await disp.drain()
    assert await status(rt, run_id) == "waiting"
    evs = await events(rt, run_id)
    assert types(evs)[5:] == ["user_input", "text", "usage", "awaiting_input"]
    assert evs[5].payload["source"] == "steer" and evs[5].payload["input_id"] > 0
    assert evs[6].payload["text"] == "second question"
    assert [m.role for m in replay([(e.seq, e.type, e.payload) for e in evs]).messages] == [
        "user", "assistant", "user", "assistant"]

    await rt.cancel_run("default", run_id, "bye")
    await disp.drain()
    run = await rt.runs.get("default", run_id)
    assert run.status == "cancelled"
    assert types(await events(rt, run_id))[-1] == "done"


async def test_input_queued_before_the_turn_ends_is_taken_without_parking(open_runtime: Any) -> None:
    rt, disp = await open_runtime({"chat": ECHO})
    run_id = await start(rt, "chat", "one", interactive=True)
    await steer(rt, run_id, "two")  # queued before the first step ran
    await disp.drain()
    evs = await events(rt, run_id)
    assert [e.payload["text"] for e in evs if e.type == "text"] == ["two"]  # taken at the top of step 1
    await steer(rt, run_id, "three")
    await disp.drain()
    assert [e.payload["text"] for e in await events(rt, run_id) if e.type == "text"] == ["two", "three"]
    assert await status(rt, run_id) == "waiting"


async def test_steering_lands_between_iterations_never_inside_a_tool_exchange(open_runtime: Any) -> None:
    rt, disp = await open_runtime({"a": {"model": "tool-caller", "tools": ["Memory"], "mock": {"tool_calls": 2}}})
    run_id = await start(rt, "a")
    await rt.engine.handle(disp.queue.pop(0))  # iteration 1: tool_call + tool_result committed
    await steer(rt, run_id, "also: be brief")
    await disp.drain()
    assert await status(rt, run_id) == "completed"  # not interactive: steering does not make it wait
    evs = await events(rt, run_id)
    t = types(evs)
    i = t.index("user_input", 1)
    assert t[i - 1] == "tool_result" and t[i + 1] == "tool_call"
    messages = replay([(e.seq, e.type, e.payload) for e in evs]).messages
    for m, nxt in itertools.pairwise(messages):  # every tool_use is answered right after it
        if m.role == "assistant" and m.tool_uses():
            answered = {b.tool_use_id for b in nxt.content if isinstance(b, ToolResultBlock)}
            assert nxt.role == "user" and answered == {u.id for u in m.tool_uses()}


async def test_input_to_a_run_parked_on_a_tool_waits_for_the_tool_result(open_runtime: Any) -> None:
    rt, disp = await open_runtime({"a": asker()})
    run_id = await start(rt, "a", interactive=True)
    await disp.drain()
    assert await steer(rt, run_id, "meanwhile") == 0  # parked on the question, not on input: stays asleep
    await disp.drain()
    assert "user_input" not in types(await events(rt, run_id))[2:]
    await answer(rt, run_id)
    await disp.drain()
    t = types(await events(rt, run_id))
    i = t.index("user_input", 1)
    assert t[i - 1] == "tool_result"
    assert t[-1] == "awaiting_input" and await status(rt, run_id) == "waiting"


async def test_turn_cancel_answers_the_pending_call_cancels_questions_and_re_parks(open_runtime: Any) -> None:
    rt, disp = await open_runtime({"a": asker()})
    run_id = await start(rt, "a", interactive=True)
    await disp.drain()
    keys = await InputStore(rt.pool).wait_keys(run_id)
    await InputStore(rt.pool).add("default", run_id, "turn_cancel", "stop that")
    assert await rt.poke("default", keys) == 1
    await disp.drain()
    assert await status(rt, run_id) == "waiting"
    evs = await events(rt, run_id)
    assert types(evs)[-3:] == ["tool_result", "turn_cancelled", "awaiting_input"]
    [res] = tool_results(evs)
    assert res["is_error"] and "cancelled by operator" in res["text"]
    assert evs[-2].payload["reason"] == "stop that"
    [row] = await InterruptStore(rt.pool).list_for_run("default", run_id)
    assert row.status == "cancelled" and row.resolved_by == "turn_cancel"
    assert await InputStore(rt.pool).wait_keys(run_id) == [input_key(run_id)]

    await steer(rt, run_id, "new turn")
    await disp.drain()
    evs = await events(rt, run_id)
    assert types(evs)[-4:] == ["user_input", "text", "usage", "awaiting_input"]  # the new turn ran
    assert evs[-3].payload["text"] == "asked"
    assert await status(rt, run_id) == "waiting"


async def test_turn_cancel_cancels_the_turns_sub_agents(open_runtime: Any) -> None:
    rt, disp = await open_runtime({"p": spawner([{"name": "asker", "prompt": "q"}]), "asker": asker()})
    run_id = await start(rt, "p", interactive=True)
    await disp.drain()
    keys = await InputStore(rt.pool).wait_keys(run_id)
    await InputStore(rt.pool).add("default", run_id, "turn_cancel", "")
    await rt.poke("default", keys)
    await disp.drain()
    async with rt.pool.connection() as conn:
        cur = await conn.execute("SELECT status, cancel_reason FROM runs WHERE parent_run_id = %s", (run_id,))
        [kid] = await cur.fetchall()
    assert kid["status"] == "cancelled" and kid["cancel_reason"] == "parent turn cancelled"
    assert await status(rt, run_id) == "waiting"
    assert types(await events(rt, run_id))[-2:] == ["turn_cancelled", "awaiting_input"]


async def test_an_explicit_iteration_cap_still_ends_an_interactive_run(open_runtime: Any) -> None:
    rt, disp = await open_runtime({"capped": {**ECHO, "max_iterations": 1}})
    capped = await start(rt, "capped", interactive=True)
    await disp.drain()
    await steer(rt, capped, "again")
    await disp.drain()
    run = await rt.runs.get("default", capped)
    assert (run.status, run.stop_reason) == ("completed", "max_iterations")  # an explicit cap still applies


async def test_input_queued_while_the_model_answers_the_last_turn_is_taken(open_runtime: Any) -> None:
    model = GatedProvider()
    rt, disp = await open_runtime({"slow": ECHO}, providers={"mock": model})
    run_id = await start(rt, "slow", "first")
    step = asyncio.create_task(rt.engine.handle(disp.queue.pop(0)))
    await asyncio.wait_for(model.entered.wait(), 10)  # the model call is under way
    await steer(rt, run_id, "late")
    model.open()
    await step
    await disp.drain()
    evs = await events(rt, run_id)
    assert [e.payload["text"] for e in evs if e.type == "text"] == ["first", "late"]
    assert types(evs)[-1] == "done" and await status(rt, run_id) == "completed"
