"""Interruptions (tool `Interruption`): ask parks the run holding nothing, an answer resumes it,
the deadline yields `timed_out`, and a re-invocation never asks twice."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.support.waiting import ECHO, answer, asker, events, result_json, scripted, start, status, tool_results, types
from treadle.builtins.interruption import InterruptionTool
from treadle.errors import ToolError
from treadle.store.interrupts import Interrupt, InterruptStore, interrupt_id, interrupt_key
from treadle.testing import age_run
from treadle.tools.base import Park, ToolContext, ToolResult


async def test_ask_parks_and_an_answer_resumes_the_run(open_runtime: Any) -> None:
    rt, disp = await open_runtime({"a": asker("deploy now?", context="prod", priority="high")})
    run_id = await start(rt, "a")
    await disp.drain()
    run = await rt.runs.get("default", run_id)
    assert run.status == "waiting" and run.lease_owner is None and disp.queue == []
    evs = await events(rt, run_id)
    assert types(evs)[-2:] == ["interruption_pending", "tool_parked"]
    pending = evs[-2].payload
    assert pending["question"] == "deploy now?" and pending["options"] == ["yes", "no"]
    assert pending["interrupt_id"].startswith("int_") and pending["expires_at"]
    assert pending["priority"] == "high" and pending["context"] == "prod"
    assert not tool_results(evs)

    iid = await answer(rt, run_id, "yes")
    assert iid == pending["interrupt_id"]
    await disp.drain()
    assert await status(rt, run_id) == "completed"
    evs = await events(rt, run_id)
    result = result_json(evs)
    assert result["status"] == "resolved" and result["answer"] == "yes" and result["interrupt_id"] == iid
    assert [e.payload["text"] for e in evs if e.type == "text"] == ["asked"]
    [row] = await InterruptStore(rt.pool).list_for_run("default", run_id)
    assert row.status == "resolved" and row.resolved_by == "api" and row.resolved_at is not None


async def test_declined_is_reported_to_the_tool(open_runtime: Any) -> None:
    rt, disp = await open_runtime({"a": asker()})
    run_id = await start(rt, "a")
    await disp.drain()
    await answer(rt, run_id, "not now", disposition="declined")
    await disp.drain()
    result = result_json(await events(rt, run_id))
    assert result["status"] == "declined" and result["answer"] == "not now"


async def test_an_unanswered_question_times_out(open_runtime: Any, migrated_db_url: str) -> None:
    rt, disp = await open_runtime({"a": asker(timeout_ms=60_000)}, url=migrated_db_url)
    run_id = await start(rt, "a")
    await disp.drain()
    assert await rt.wake_due() == 0
    await age_run(rt, run_id, 61)  # the minute passes
    assert await rt.wake_due() == 1
    await disp.drain()
    assert await status(rt, run_id) == "completed"
    result = result_json(await events(rt, run_id))
    assert result["status"] == "timed_out" and result["answer"] is None
    [row] = await InterruptStore(rt.pool).list_for_run("default", run_id)
    assert row.status == "timed_out" and row.resolved_by == "timeout"
    # too late: an answer no longer lands
    assert await InterruptStore(rt.pool).resolve("default", run_id, row.id, answer="x", status="resolved",
                                                 resolved_by="api") is None


async def test_a_re_invocation_does_not_ask_twice(open_runtime: Any) -> None:
    rt, disp = await open_runtime({"a": asker()})
    run_id = await start(rt, "a")
    await disp.drain()
    [call] = [e.payload["tool_use"]["id"] for e in await events(rt, run_id) if e.type == "tool_call"]
    iid = interrupt_id(run_id, call)
    assert await rt.poke("default", [interrupt_key(iid)]) == 1  # woken with no answer: it parks again
    await disp.drain()
    assert await status(rt, run_id) == "waiting"
    evs = await events(rt, run_id)
    assert types(evs).count("interruption_pending") == 1 and types(evs).count("tool_parked") == 2
    assert len(await InterruptStore(rt.pool).list_for_run("default", run_id)) == 1
    await answer(rt, run_id)
    await disp.drain()
    assert await status(rt, run_id) == "completed"


async def test_notify_records_an_event(open_runtime: Any) -> None:
    turns: list[dict[str, Any]] = [
        {"tool": "Interruption", "input": {"op": "notify", "message": "halfway"}}, {"text": "ok"}]
    rt, disp = await open_runtime({"n": scripted(turns, ["Interruption"])})
    run_id = await start(rt, "n")
    await disp.drain()
    evs = await events(rt, run_id)
    [note] = [e.payload for e in evs if e.type == "interruption_notify"]
    assert note == {"message": "halfway", "priority": "normal"}
    assert result_json(evs) == {"notified": True}


async def test_cancel_op_settles_a_pending_question(open_runtime: Any) -> None:
    rt, _disp = await open_runtime({"e": ECHO})
    run_id = await start(rt, "e")
    tool = InterruptionTool()

    def ctx(tool_use_id: str, resume: dict[str, Any] | None = None) -> ToolContext:
        return rt.tool_context("default", run_id, "e", tool_use_id=tool_use_id,  # type: ignore[no-any-return]
                               resume=resume)

    asked = await tool.invoke(ctx("t1"), {"op": "ask", "question": "?"})
    assert isinstance(asked, Park) and asked.events[0][0] == "interruption_pending"
    iid = asked.extra["interrupt_id"]
    done = await tool.invoke(ctx("t2"), {"op": "cancel", "interrupt_id": iid})
    assert isinstance(done, ToolResult) and '"status":"cancelled"' in done.content
    again = await tool.invoke(ctx("t1", resume={"deadline": None}), {"op": "ask", "question": "?"})
    assert isinstance(again, ToolResult) and '"status":"cancelled"' in again.content
    with pytest.raises(ToolError, match="already cancelled"):
        await tool.invoke(ctx("t3"), {"op": "cancel", "interrupt_id": iid})
    with pytest.raises(ToolError, match="no interruption"):
        await tool.invoke(ctx("t3"), {"op": "cancel", "interrupt_id": "int_nope"})


@pytest.mark.parametrize("crash", [False, True])
async def test_a_cancel_that_lands_mid_step_rolls_the_step_back_and_ends_the_run(
    open_runtime: Any, migrated_db_url: str, monkeypatch: pytest.MonkeyPatch, crash: bool
) -> None:
    rt, disp = await open_runtime({"a": asker()}, url=migrated_db_url)
    if crash:  # the process dies right after the park commit, before re-checking for a cancel
        async def dies(*_a: Any) -> None:
            return None

        monkeypatch.setattr(rt.engine.steering, "cancel_if_requested", dies)
    run_id = await start(rt, "a")
    tool = rt.engine.agents["a"].tools_by_name["Interruption"]
    ask = tool.invoke
    cancelling: list[asyncio.Task[Any]] = []

    async def ask_while_a_cancel_lands(ctx: ToolContext, args: dict[str, Any]) -> ToolResult | Park:
        # the cancel request commits while the tool runs inside the step's transaction (another
        # task: it does not join that transaction); the park commit then sees it and does not park
        cancelling.append(asyncio.create_task(rt.cancel_run("default", run_id, "never mind")))
        await cancelling[0]
        result: ToolResult | Park = await ask(ctx, args)
        return result

    monkeypatch.setattr(tool, "invoke", ask_while_a_cancel_lands)
    await disp.drain()
    await cancelling[0]
    await disp.drain()
    # the step yields to the cancel: it rolls back with the question it asked, and the run ends
    # cancelled — nobody's inbox shows a question the run will never read
    assert await status(rt, run_id) == "cancelled"
    evs = await events(rt, run_id)
    assert tool_results(evs) == [] and "tool_call" not in types(evs)
    assert await InterruptStore(rt.pool).list_for_run("default", run_id) == []


async def test_the_operator_bounds_interruptions_in_yaml(open_runtime: Any, migrated_db_url: str) -> None:
    """`interruption:` sets the default and the longest timeout and the pending questions per run."""
    bounds = {"interruption": {"default_timeout_ms": 200, "max_timeout_ms": 1000, "max_pending_per_run": 1}}
    agents = {
        "quick": asker(),  # no timeout_ms: the operator's default (200 ms) applies
        "greedy": asker(timeout_ms=5000),
    }
    rt, disp = await open_runtime(agents, url=migrated_db_url, config=bounds)
    quick = await start(rt, "quick")
    greedy = await start(rt, "greedy")
    await disp.drain()
    [row] = await InterruptStore(rt.pool).list_for_run("default", quick)
    assert row.expires_at is not None
    assert (row.expires_at - row.created_at).total_seconds() == pytest.approx(0.2, abs=0.05)
    [refused] = tool_results(await events(rt, greedy))
    assert refused["is_error"] and "1..1000" in refused["text"]
    await age_run(rt, quick, 1)  # its 200 ms pass
    assert await rt.wake_due() == 1
    await disp.drain()
    assert result_json(await events(rt, quick))["status"] == "timed_out"
    # at most max_pending_per_run pending questions per run (two parallel asks in one turn, say)
    assert rt.config.interruption.max_pending_per_run == 1
    store = InterruptStore(rt.pool)
    other = await start(rt, "greedy")

    async def ask(tool_use_id: str) -> Interrupt | None:
        return await store.open("default", other, tool_use_id, question="a?", options=[], context=None,
                                priority="normal", timeout_s=60, max_pending=1)

    assert await ask("toolu_1") is not None
    assert await ask("toolu_2") is None
