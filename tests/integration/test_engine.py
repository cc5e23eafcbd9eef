"""Engine steps against a real Postgres, driven by the inline dispatcher."""

from __future__ import annotations

import asyncio
import json
import secrets
from typing import Any

from treadle.domain.runs import StepMessage
from treadle.engine.outcomes import StepResult
from treadle.store.runs import NewRun, StoredEvent
from treadle.testing import until, user_text

TOOL_CALLER = {"model": "tool-caller", "tools": ["Memory"], "mock": {"tool_calls": 3}}


async def start(rt: Any, agent: str, text: str = "hi", **kw: Any) -> str:
    run, created = await rt.start_run(NewRun(tenant_id=kw.pop("tenant", "default"), agent=agent,
                                             segments=user_text(text), **kw))
    assert created
    return str(run.id)


Shaped = list[tuple[int, str, dict[str, Any]]]


def shape(events: list[StoredEvent]) -> Shaped:
    """The transcript without timestamps (and without the run id inside `started`)."""
    return [(e.seq, e.type, {k: v for k, v in e.payload.items() if k != "run_id"}) for e in events]


def without_ids(shaped: Shaped) -> Shaped:
    """A shaped transcript without what differs between two runs of one script (tool use ids, texts)."""
    return [(s, t, {k: v for k, v in p.items() if k not in ("tool_use", "text")}) for s, t, p in shaped]


async def test_tool_caller_run_completes_with_paired_results(open_runtime: Any) -> None:
    rt, disp = await open_runtime({"a": TOOL_CALLER})
    tenant = "t_" + secrets.token_hex(6)  # a tenant of its own: the Memory counter starts from zero
    run_id = await start(rt, "a", tenant=tenant)
    await disp.drain()
    run = await rt.runs.get(tenant, run_id)
    assert run.status == "completed" and run.stop_reason == "end_turn"
    assert run.iterations == 4
    events = await rt.runs.events(tenant, run_id)
    types = [e.type for e in events]
    assert types.count("tool_call") == 3 and types.count("tool_result") == 3
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert events[-1].type == "done" and events[-1].payload["stop_reason"] == "end_turn"
    calls = [e.payload["tool_use"]["id"] for e in events if e.type == "tool_call"]
    results = [e.payload["tool_use"]["id"] for e in events if e.type == "tool_result"]
    assert calls == results
    # each call is `Memory incr agent/calls`: the three results count 1, 2, 3
    counts = [json.loads(e.payload["text"]) for e in events if e.type == "tool_result"]
    assert counts == [{"key": "calls", "value": n} for n in (1, 2, 3)]
    final_text = [e.payload["text"] for e in events if e.type == "text"]
    assert final_text == ["done after 3 tool calls"]


async def test_duplicate_delivery_gives_the_same_transcript(open_runtime: Any) -> None:
    rt, disp = await open_runtime({"a": TOOL_CALLER})
    once = await start(rt, "a")
    await disp.drain()
    disp.duplicate_every_message = True
    twice = await start(rt, "a")
    # the initial message is enqueued once by start_run; deliver it again by hand
    disp.queue.append(StepMessage(twice, 0))
    delivered = await disp.drain()
    assert delivered >= 2 * 4
    a = shape(await rt.runs.events("default", once))
    b = shape(await rt.runs.events("default", twice))
    assert without_ids(a) == without_ids(b)
    assert len(a) == len(b)
    run = await rt.runs.get("default", twice)
    assert run.status == "completed" and run.iterations == 4


async def test_stale_step_message_is_dropped(open_runtime: Any) -> None:
    rt, disp = await open_runtime({"a": TOOL_CALLER})
    run_id = await start(rt, "a")
    await disp.drain()
    before = await rt.runs.events("default", run_id)
    assert await rt.engine.handle(StepMessage(run_id, 0)) is StepResult.DROPPED
    assert await rt.engine.handle(StepMessage(run_id, 2)) is StepResult.DROPPED
    assert len(await rt.runs.events("default", run_id)) == len(before)


async def test_max_iterations_stops_the_run_with_results_recorded(open_runtime: Any) -> None:
    rt, disp = await open_runtime(
        {"a": {"model": "tool-caller", "tools": ["Memory"], "max_iterations": 2, "mock": {"tool_calls": 10}}}
    )
    run_id = await start(rt, "a")
    await disp.drain()
    run = await rt.runs.get("default", run_id)
    assert (run.status, run.stop_reason, run.iterations) == ("completed", "max_iterations", 2)
    events = await rt.runs.events("default", run_id)
    assert [e.type for e in events][-2:] == ["tool_result", "done"]


async def test_tool_errors_become_error_results_not_crashes(open_runtime: Any) -> None:
    script = [
        {"tool": "Memory", "input": {"op": "explode", "scope": "agent"}},
        {"tool": "Memory", "input": {"op": "get", "scope": "tenant", "key": "x"}},
        {"tool": "Shell", "input": {"cmd": "rm -rf /"}},
        {"text": "ok"},
    ]
    rt, disp = await open_runtime({"s": {"model": "script", "tools": ["Memory"], "mock": {"script": script}}})
    run_id = await start(rt, "s")
    await disp.drain()
    run = await rt.runs.get("default", run_id)
    assert run.status == "completed"
    results = [e.payload for e in await rt.runs.events("default", run_id) if e.type == "tool_result"]
    assert [r["is_error"] for r in results] == [True, True, True]
    assert "op must be one of" in results[0]["text"]
    assert "not permitted" in results[1]["text"]
    assert "not permitted for agent" in results[2]["text"]


async def test_cancel_before_first_step(open_runtime: Any) -> None:
    rt, disp = await open_runtime({"a": TOOL_CALLER})
    run_id = await start(rt, "a")
    await rt.cancel_run("default", run_id, "changed my mind")
    await disp.drain()
    run = await rt.runs.get("default", run_id)
    assert (run.status, run.stop_reason) == ("cancelled", "cancelled")
    events = await rt.runs.events("default", run_id)
    assert events[-1].type == "done" and events[-1].payload["reason"] == "changed my mind"


async def test_cancel_mid_run_answers_pending_tool_uses(open_runtime: Any) -> None:
    """A crash left a tool_use unanswered; cancel must close it with an error result."""
    rt, disp = await open_runtime({"a": TOOL_CALLER})
    run_id = await start(rt, "a")
    owner = rt.engine.new_owner()
    leased = await rt.steps.lease(run_id, 0, owner)
    from treadle.domain.runs import NewEvent

    tu = {"id": "toolu_x", "name": "Memory", "input": {"op": "incr", "scope": "agent", "key": "k"}}
    await rt.steps.append(leased, owner, [NewEvent("tool_call", {"tool_use": tu, "iteration": 1}),
                                         NewEvent("usage", {"usage": {}, "iteration": 1})])
    # the worker "dies" here; its lease is released by hand (as the sweeper would on expiry)
    async with rt.pool.connection() as conn:
        await conn.execute("UPDATE runs SET lease_owner = NULL WHERE id = %s", (run_id,))
    disp.queue.clear()
    await rt.cancel_run("default", run_id, "stop")
    await disp.drain()
    events = await rt.runs.events("default", run_id)
    results = [e for e in events if e.type == "tool_result"]
    assert len(results) == 1 and results[0].payload["is_error"] and "cancelled" in results[0].payload["text"]
    assert (await rt.runs.get("default", run_id)).status == "cancelled"


async def test_resume_runs_only_the_unanswered_tools(open_runtime: Any) -> None:
    rt, disp = await open_runtime({"a": TOOL_CALLER})
    run_id = await start(rt, "a")
    disp.queue.clear()
    owner = rt.engine.new_owner()
    leased = await rt.steps.lease(run_id, 0, owner)
    from treadle.domain.runs import NewEvent

    tu = {"id": "toolu_resume", "name": "Memory", "input": {"op": "incr", "scope": "agent", "key": "resume"}}
    await rt.steps.append(leased, owner, [NewEvent("tool_call", {"tool_use": tu, "iteration": 1}),
                                         NewEvent("usage", {"usage": {"input_tokens": 5}, "iteration": 1})])
    async with rt.pool.connection() as conn:
        await conn.execute("UPDATE runs SET lease_owner = NULL WHERE id = %s", (run_id,))
    assert await rt.engine.handle(StepMessage(run_id, 0)) is StepResult.CONTINUED
    events = await rt.runs.events("default", run_id)
    assert [e.type for e in events][-3:] == ["tool_call", "usage", "tool_result"]
    assert events[-1].payload["tool_use"]["id"] == "toolu_resume"


async def test_provider_429s_are_retried_and_recorded(open_runtime: Any) -> None:
    rt, disp = await open_runtime(
        {"e": {"model": "echo", "mock": {"error_rate": 0.6, "seed": 3}}}, provider_retries=10
    )
    ids = [await start(rt, "e", f"hello {i}") for i in range(6)]
    await disp.drain()
    retries, completed = 0, 0
    for run_id in ids:  # the 429s are random per run id: each run either got through or used every retry
        run = await rt.runs.get("default", run_id)
        events = await rt.runs.events("default", run_id)
        mine = sum(1 for e in events if e.type == "retry")
        retries += mine
        if run.status == "completed":
            completed += 1
            assert mine <= 10
            assert next(e.payload["text"] for e in events if e.type == "text").startswith("hello")
        else:
            assert (run.status, run.error["code"], mine) == ("failed", "rate_limited", 10)
    assert retries > 0 and completed > 0


async def test_provider_failure_after_retries_fails_the_run(open_runtime: Any) -> None:
    rt, disp = await open_runtime({"e": {"model": "echo", "mock": {"error_rate": 1.0}}}, provider_retries=2)
    run_id = await start(rt, "e")
    await disp.drain()
    run = await rt.runs.get("default", run_id)
    assert (run.status, run.stop_reason) == ("failed", "error")
    assert run.error["code"] == "rate_limited"
    types = [e.type for e in await rt.runs.events("default", run_id)]
    assert types.count("retry") == 2 and types[-1] == "error"


async def test_chained_steps_give_the_same_transcript_with_fewer_messages(open_runtime: Any) -> None:
    """With chaining a worker keeps the lease and goes on to the run's next step at once; the
    transcript must be exactly what one-message-per-step produces."""
    one, disp_one = await open_runtime({"a": TOOL_CALLER})
    chained, disp_chained = await open_runtime({"a": TOOL_CALLER}, chain_steps=3, chain_budget_seconds=60)
    a = await start(one, "a")
    b = await start(chained, "a")
    assert await disp_one.drain() == 4
    assert await disp_chained.drain() == 2  # steps 0-2 chained, then 3 by a new message
    assert without_ids(shape(await one.runs.events("default", a))) == without_ids(
        shape(await chained.runs.events("default", b)))
    run = await chained.runs.get("default", b)
    assert (run.status, run.iterations, run.step_no) == ("completed", 4, 4)
    assert run.lease_owner is None


async def test_cancel_reaches_a_chained_run(open_runtime: Any) -> None:
    rt, disp = await open_runtime(
        {"a": {"model": "tool-caller", "tools": ["Memory"], "mock": {"tool_calls": 50, "latency_ms": 5}}},
        chain_steps=100, chain_budget_seconds=60,
    )
    run_id = await start(rt, "a")
    disp.queue.clear()
    task = asyncio.create_task(rt.engine.handle(StepMessage(run_id, 0)))
    async def two_iterations() -> bool:
        return bool((await rt.runs.get("default", run_id)).iterations >= 2)

    await until(two_iterations, 20, what="two iterations")
    await rt.runs.request_cancel("default", run_id, "enough")
    assert await asyncio.wait_for(task, 30) is StepResult.FINISHED
    run = await rt.runs.get("default", run_id)
    assert run.status == "cancelled" and 2 <= run.iterations < 50
