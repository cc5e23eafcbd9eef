"""treadle.testing, the helpers shipped for users' tests: a runtime with an inline dispatcher, a
model scripted by a function, and clocks moved instead of slept."""

from __future__ import annotations

import json
from typing import Any

import pytest

from treadle.domain.content import TextBlock
from treadle.domain.runs import StepMessage
from treadle.providers.base import ModelRequest
from treadle.store.runs import NewRun
from treadle.testing import (
    Reply,
    ScriptedProvider,
    age_run,
    expire_lease,
    open_test_runtime,
    sweep,
    tool_results,
    tool_use,
    user_text,
)

TENANT = "testing"


def remember(req: ModelRequest) -> Reply:
    """First turn: store the number the user gave; second turn: answer with what the tool said."""
    done = tool_results(req)
    if not done:
        number = int(req.messages[-1].text().split()[-1])
        note = {"op": "set", "scope": "agent", "key": "n", "value": number}
        return [TextBlock("noting it"), tool_use("Memory", note)]
    return f"noted: {done[0].content}"


async def remember_async(req: ModelRequest) -> Reply:
    return remember(req)


@pytest.mark.parametrize("fn", [remember, remember_async], ids=["sync", "async"])
async def test_a_scripted_model_calls_a_tool_then_answers(migrated_db_url: str, fn: Any) -> None:
    model = ScriptedProvider(fn)
    agents = {"a": {"provider": "scripted", "model": "echo", "tools": ["Memory"], "memory_scopes": ["agent"]}}
    async with open_test_runtime(agents, database_url=migrated_db_url, providers=[model]) as (rt, dispatcher):
        run, _ = await rt.start_run(NewRun(tenant_id=TENANT, agent="a", segments=user_text("remember 42")))
        await dispatcher.drain()

        done = await rt.runs.get(TENANT, run.id)
        assert done is not None and (done.status, done.iterations, done.stop_reason) == ("completed", 2, "end_turn")
        events = await rt.runs.events(TENANT, run.id)
        assert [e.type for e in events] == [
            "user_input", "started", "text", "tool_call", "usage", "tool_result", "text", "usage", "done",
        ]
        [call] = [e.payload["tool_use"] for e in events if e.type == "tool_call"]
        [result] = [e.payload for e in events if e.type == "tool_result"]
        assert call["id"].startswith("toolu_") and result["tool_use"]["id"] == call["id"]
        assert json.loads(result["text"]) == {"ok": True, "key": "n", "scope": "agent"}
        assert [e.payload["text"] for e in events if e.type == "text"][-1] == f"noted: {result['text']}"
        assert {e.payload["usage"]["provider"] for e in events if e.type == "usage"} == {"scripted"}
        assert await rt.memory.get(TENANT, "agent", "a", "n") == (True, 42)

        # the model saw the tool offered, then its own call answered
        first, second = model.requests
        assert [t.name for t in first.tools] == ["Memory"] and first.model == "echo"
        assert tool_results(first) == [] and [r.tool_use_id for r in tool_results(second)] == [call["id"]]


async def test_a_dead_workers_lease_is_expired_and_the_run_swept_back(migrated_db_url: str) -> None:
    async with open_test_runtime({"a": {"model": "echo"}}, database_url=migrated_db_url) as (rt, dispatcher):
        run, _ = await rt.start_run(NewRun(tenant_id=TENANT, agent="a", segments=user_text("still there?")))
        [msg] = dispatcher.queue
        dispatcher.queue.clear()
        leased = await rt.steps.lease(run.id, msg.step_no, "worker-that-dies")  # takes the step, then dies
        assert leased is not None
        assert await sweep(rt) == 0  # its lease is live: nothing to sweep

        assert await expire_lease(rt, run.id)  # … until it runs out
        assert await sweep(rt) == 1
        assert dispatcher.queue == [StepMessage(run.id, 0)]
        await dispatcher.drain()
        done = await rt.runs.get(TENANT, run.id)
        assert done is not None and done.status == "completed" and done.lease_owner is None
        assert [e.payload["text"] for e in await rt.runs.events(TENANT, run.id) if e.type == "text"] == ["still there?"]
        assert not await expire_lease(rt, run.id)  # a finished run holds no lease


async def test_age_run_passes_a_parked_calls_deadline(migrated_db_url: str) -> None:
    subscribe = {"op": "subscribe", "channel": "news", "wait_ms": 3_600_000}
    agents = {"l": {"model": "script", "tools": ["Channel"],
                    "mock": {"script": [{"tool": "Channel", "input": subscribe}, {"text": "gave up"}]}}}
    config = {"channels": {"news": {"semantic": "broadcast"}}}
    async with open_test_runtime(agents, database_url=migrated_db_url, config=config) as (rt, dispatcher):
        run, _ = await rt.start_run(NewRun(tenant_id=TENANT, agent="l", segments=user_text("wait for news")))
        await dispatcher.drain()
        assert await sweep(rt) == 0
        await age_run(migrated_db_url, run.id, 1800)  # half the hour: not yet
        assert await sweep(rt) == 0
        await age_run(rt.pool, run.id, 1800)  # the hour has passed
        assert await sweep(rt) == 1
        await dispatcher.drain()
        done = await rt.runs.get(TENANT, run.id)
        assert done is not None and done.status == "completed"
        [result] = [e.payload for e in await rt.runs.events(TENANT, run.id) if e.type == "tool_result"]
        assert json.loads(result["text"])["timed_out"] is True


async def test_the_postgres_queue_instead_of_the_inline_dispatcher(migrated_db_url: str) -> None:
    async with open_test_runtime({}, database_url=migrated_db_url, inline=False) as (rt, queue):
        assert queue is rt.dispatcher and queue.jobs_in_db
        assert rt.settings.workers == 4 and rt.settings.chain_steps == 1  # a test runtime's defaults
