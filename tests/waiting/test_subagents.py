"""Sub-agents (tool `Agent`): children are real runs, the parent parks holding nothing, results
come back index-aligned, cancel cascades, and nothing is lost across restarts or lost pokes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.waiting import (
    ECHO,
    FAILING,
    answer,
    asker,
    children,
    events,
    result_json,
    scripted,
    spawner,
    start,
    status,
    tool_results,
    types,
)
from treadle.engine.workers import Sweeper
from treadle.store.subruns import spawn_wait_key
from treadle.testing import expire_lease


def eight_with_two_failing() -> list[dict[str, str]]:
    return [{"name": "bad" if i in (2, 5) else "echo", "prompt": f"task {i}"} for i in range(8)]


async def test_parallel_spawn_of_eight_with_two_failures_returns_eight_aligned_results(open_runtime: Any) -> None:
    agents = {"parent": spawner(eight_with_two_failing(), max_concurrent_children=8), "echo": ECHO, "bad": FAILING}
    rt, disp = await open_runtime(agents, provider_retries=0)
    parent = await start(rt, "parent")
    await disp.drain()
    assert await status(rt, parent) == "completed"
    evs = await events(rt, parent)
    results = result_json(evs)
    assert [r["index"] for r in results] == list(range(8))
    assert [r["ok"] for r in results] == [i not in (2, 5) for i in range(8)]
    assert [r["output"] for r in results if r["ok"]] == [f"task {i}" for i in range(8) if i not in (2, 5)]
    assert all("rate_limited" in r["error"] for r in results if not r["ok"])
    assert [r["agent"] for r in results] == ["bad" if i in (2, 5) else "echo" for i in range(8)]
    assert tool_results(evs)[0]["is_error"] is False  # a child's failure stays inside the envelope
    assert types(evs).count("spawn_child_result") == 8
    assert [e.payload["text"] for e in evs if e.type == "text"] == ["all done"]
    kids = await children(rt, parent)
    assert len(kids) == 8
    assert {k["id"] for k in kids} == {r["run_id"] for r in results}
    assert all(k["depth"] == 1 and k["root_run_id"] == parent and k["parent_run_id"] == parent for k in kids)
    assert sorted(k["status"] for k in kids) == ["completed"] * 6 + ["failed"] * 2
    # each child has its own transcript
    child_evs = await events(rt, results[0]["run_id"])
    assert types(child_evs)[:2] == ["user_input", "started"] and types(child_evs)[-1] == "done"


async def test_spawn_returns_the_single_childs_result(open_runtime: Any) -> None:
    turns: list[dict[str, Any]] = [
        {"tool": "Agent", "input": {"op": "spawn", "name": "echo", "prompt": "ping"}}, {"text": "ok"}]
    rt, disp = await open_runtime({"p": scripted(turns, ["Agent"]), "echo": ECHO})
    parent = await start(rt, "p")
    await disp.drain()
    assert await status(rt, parent) == "completed"
    result = result_json(await events(rt, parent))
    assert result["ok"] is True and result["output"] == "ping" and result["index"] == 0 and result["agent"] == "echo"


async def test_a_parent_waiting_on_waiting_children_holds_nothing(open_runtime: Any) -> None:
    spawns = [{"name": "asker", "prompt": f"q{i}"} for i in range(3)]
    rt, disp = await open_runtime({"parent": spawner(spawns), "asker": asker()})
    parent = await start(rt, "parent")
    await disp.drain()
    kids = await children(rt, parent)
    assert len(kids) == 3
    for run_id in [parent, *(k["id"] for k in kids)]:
        run = await rt.runs.get("default", run_id)
        assert run.status == "waiting" and run.lease_owner is None
    assert disp.queue == []  # nothing scheduled, no worker held
    assert types(await events(rt, parent))[-1] == "tool_parked"

    for k in kids:
        await answer(rt, k["id"], f"yes {k['id'][-4:]}")
    await disp.drain()
    assert await status(rt, parent) == "completed"
    assert [r["output"] for r in result_json(await events(rt, parent))] == ["asked"] * 3


async def test_max_concurrent_children_starts_the_rest_as_earlier_ones_finish(open_runtime: Any) -> None:
    spawns = [{"name": "asker", "prompt": f"q{i}"} for i in range(5)]
    rt, disp = await open_runtime({"parent": spawner(spawns, max_concurrent_children=2), "asker": asker()})
    parent = await start(rt, "parent")
    await disp.drain()
    seen = []
    for _ in range(5):
        kids = await children(rt, parent)
        active = [k for k in kids if k["status"] not in ("completed", "failed", "cancelled")]
        seen.append((len(kids), len(active)))
        assert len(active) <= 2
        await answer(rt, active[0]["id"])
        await disp.drain()
    assert seen == [(2, 2), (3, 2), (4, 2), (5, 2), (5, 1)]
    assert await status(rt, parent) == "completed"
    assert [r["index"] for r in result_json(await events(rt, parent))] == [0, 1, 2, 3, 4]


async def test_a_re_invoked_call_finds_its_children_instead_of_starting_new_ones(open_runtime: Any) -> None:
    spawns = [{"name": "asker", "prompt": f"q{i}"} for i in range(2)]
    rt, disp = await open_runtime({"parent": spawner(spawns), "asker": asker()})
    parent = await start(rt, "parent")
    await disp.drain()
    before = await children(rt, parent)
    [call] = [e.payload["tool_use"]["id"] for e in await events(rt, parent) if e.type == "tool_call"]
    # a spurious wake re-invokes the same tool call: it re-parks and creates nothing
    assert await rt.poke("default", [spawn_wait_key(parent, call)]) == 1
    await disp.drain()
    assert await status(rt, parent) == "waiting"
    assert [k["id"] for k in await children(rt, parent)] == [k["id"] for k in before]
    evs = await events(rt, parent)
    assert types(evs).count("tool_parked") == 2 and not tool_results(evs)


async def test_cancelling_a_parent_cancels_its_subtree(open_runtime: Any) -> None:
    middle = spawner([{"name": "asker", "prompt": "deep"}])
    rt, disp = await open_runtime(
        {"top": spawner([{"name": "middle", "prompt": "m"}, {"name": "asker", "prompt": "a"}]),
         "middle": middle, "asker": asker()}
    )
    top = await start(rt, "top")
    await disp.drain()
    kids = await children(rt, top)
    [mid] = [k["id"] for k in kids if k["agent"] == "middle"]
    [grandchild] = await children(rt, mid)
    assert grandchild["depth"] == 2 and grandchild["root_run_id"] == top
    await rt.cancel_run("default", top, "enough")
    await disp.drain()
    assert await status(rt, top) == "cancelled"
    for run_id in [k["id"] for k in kids] + [grandchild["id"]]:
        run = await rt.runs.get("default", run_id)
        assert run.status == "cancelled", run_id
    assert {k["cancel_reason"] for k in await children(rt, top)} == {"parent run cancelled"}
    [res] = tool_results(await events(rt, top))
    assert res["is_error"] and "enough" in res["text"]


async def test_depth_is_limited_to_three(open_runtime: Any) -> None:
    nest = scripted([{"tool": "Agent", "input": {"op": "spawn", "name": "nest", "prompt": "go"}}, {"text": "done"}],
                    ["Agent"])
    rt, disp = await open_runtime({"nest": nest})
    root = await start(rt, "nest")
    await disp.drain()
    assert await status(rt, root) == "completed"
    chain, run_id = [], root
    while kids := await children(rt, run_id):
        [kid] = kids
        chain.append(kid["depth"])
        run_id = kid["id"]
    assert chain == [1, 2, 3]
    [deepest] = tool_results(await events(rt, run_id))
    assert deepest["is_error"] and "at most 3" in deepest["text"]
    assert result_json(await events(rt, root))["ok"] is True


async def test_unknown_agent_and_bad_input_are_tool_errors(open_runtime: Any) -> None:
    turns: list[dict[str, Any]] = [
        {"tool": "Agent", "input": {"op": "spawn", "name": "ghost", "prompt": "boo"}},
        {"tool": "Agent", "input": {"op": "parallel_spawn", "spawns": []}},
        {"tool": "Agent", "input": {"op": "parallel_spawn", "spawns": [{"name": "echo", "prompt": "x"}] * 33}},
        {"text": "end"},
    ]
    rt, disp = await open_runtime({"p": scripted(turns, ["Agent"]), "echo": ECHO})
    parent = await start(rt, "p")
    await disp.drain()
    results = tool_results(await events(rt, parent))
    assert [r["is_error"] for r in results] == [True, True, True]
    assert "ghost" in results[0]["text"] and "non-empty" in results[1]["text"] and "32" in results[2]["text"]
    assert await children(rt, parent) == []


async def test_a_parent_parked_on_children_survives_a_restart(open_runtime: Any, migrated_db_url: str) -> None:
    agents = {"parent": spawner([{"name": "echo", "prompt": "a"}, {"name": "echo", "prompt": "b"}]), "echo": ECHO}
    rt, disp = await open_runtime(agents, url=migrated_db_url)
    parent = await start(rt, "parent")
    await rt.engine.handle(disp.queue.pop(0))  # only the parent's step: it starts both children and parks
    assert await status(rt, parent) == "waiting"
    assert len(disp.queue) == 2  # the children's first steps, about to be lost with the process
    await rt.close()

    rt2, disp2 = await open_runtime(agents, url=migrated_db_url)
    assert disp2.queue == []
    for kid in await children(rt2, parent):  # their re-queue deadline passes
        assert await expire_lease(rt2, kid["id"])
    sweeper = Sweeper(rt2.engine, disp2, 1.0, wake_due=rt2.wake_due)
    assert await sweeper.sweep_once() == 2  # the children's lost messages, re-enqueued
    await disp2.drain()
    assert await status(rt2, parent) == "completed"
    assert [r["output"] for r in result_json(await events(rt2, parent))] == ["a", "b"]


async def test_a_lost_wake_up_is_found_by_the_sweeper(
    open_runtime: Any, migrated_db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    rt, disp = await open_runtime({"parent": spawner([{"name": "echo", "prompt": "a"}]), "echo": ECHO},
                                  url=migrated_db_url)

    async def crash_before_poke(*_a: Any) -> None:
        return None

    monkeypatch.setattr(rt.engine.steering, "wake_parent", crash_before_poke)
    parent = await start(rt, "parent")
    await disp.drain()
    [kid] = await children(rt, parent)
    assert kid["status"] == "completed" and await status(rt, parent) == "waiting"
    monkeypatch.undo()

    assert await rt.wake_due() == 1
    await disp.drain()
    assert await status(rt, parent) == "completed"
    assert json.loads(tool_results(await events(rt, parent))[0]["text"])[0]["output"] == "a"


async def test_a_lost_wake_up_of_a_wait_any_is_done_by_the_sweeper(
    open_runtime: Any, migrated_db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`wait: any`: the first child to complete is enough, though its sibling still waits. Its
    final commit recorded the poke of the parent's key, so a crash between that commit and the
    poke leaves it to the sweeper, which wakes the parent: the sibling is cancelled then, not
    whenever it ends (the sweeper's other repair needs every child ended)."""
    call = {"tool": "Agent", "input": {"op": "parallel_spawn", "wait": "any",
                                       "spawns": [{"name": "echo", "prompt": "a"}, {"name": "asker", "prompt": "b"}]}}
    agents = {"parent": scripted([call, {"text": "one was enough"}], ["Agent"]), "echo": ECHO, "asker": asker()}
    rt, disp = await open_runtime(agents, url=migrated_db_url)

    async def crash_before_poke(*_a: Any) -> None:
        return None

    monkeypatch.setattr(rt.engine.steering, "wake_parent", crash_before_poke)
    parent = await start(rt, "parent")
    await disp.drain()
    kids = {k["agent"]: k for k in await children(rt, parent)}
    assert kids["echo"]["status"] == "completed" and kids["asker"]["status"] == "waiting"
    assert await status(rt, parent) == "waiting"
    monkeypatch.undo()

    assert await rt.wake_due() >= 1
    await disp.drain()
    assert await status(rt, parent) == "completed"
    assert await status(rt, kids["asker"]["id"]) == "cancelled"
    got = json.loads(tool_results(await events(rt, parent))[0]["text"])
    assert got[0]["ok"] and got[0]["output"] == "a" and got[1]["error"].startswith("cancelled"), got


async def test_spawn_with_def_id_runs_that_agentdef_version(open_runtime: Any) -> None:
    """def_id pins a child to one AgentDef version — also one never promoted; a retired version
    or another agent's def_id is a tool error and starts nothing."""

    rt, _ = await open_runtime({"echo": ECHO})
    agents = rt.substrate.agents
    v1 = await agents.dispatch("default", {"op": "create", "name": "helper", "overlay": {
        "provider": "mock", "model": "echo", "system_prompt": "v1"}})
    v2 = await agents.dispatch("default", {"op": "fork", "name": "helper", "overlay": {"system_prompt": "v2"}})
    assert v2["version"] == 2 and not v2["active"]  # a fork is not promoted by default
    retired = await agents.dispatch("default", {"op": "create", "name": "old", "overlay": {
        "provider": "mock", "model": "echo"}})
    await agents.dispatch("default", {"op": "retire", "def_id": retired["def_id"]})

    turns: list[dict[str, Any]] = [
        {"tool": "Agent", "input": {"op": "parallel_spawn", "spawns": [
            {"name": "helper", "prompt": "pinned", "def_id": v2["def_id"]},
            {"name": "helper", "prompt": "current"}]}},
        {"tool": "Agent", "input": {"op": "spawn", "name": "echo", "prompt": "x", "def_id": v1["def_id"]}},
        {"tool": "Agent", "input": {"op": "spawn", "name": "old", "prompt": "x", "def_id": retired["def_id"]}},
        {"tool": "Agent", "input": {"op": "spawn", "name": "helper", "prompt": "x", "def_id": 7}},
        {"text": "end"},
    ]
    # a second runtime on the same database: the script needs the def_ids created above
    rt2, disp2 = await open_runtime({"p": scripted(turns, ["Agent"]), "echo": ECHO})
    parent = await start(rt2, "p")
    await disp2.drain()
    results = tool_results(await events(rt2, parent))
    assert [r["is_error"] for r in results] == [False, True, True, True]
    assert "of agent 'echo' not found" in results[1]["text"] and "is retired" in results[2]["text"]
    assert "def_id must be" in results[3]["text"]
    kids = sorted(await children(rt2, parent), key=lambda k: k["idempotency_key"])
    assert len(kids) == 2
    pins = {}
    for k in kids:
        run = await rt2.runs.get("default", k["id"])
        pins[run.def_id] = run
    assert set(pins) == {v2["def_id"], v1["def_id"]}  # index 0 pinned to v2, index 1 got the promoted v1
