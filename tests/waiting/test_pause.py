"""The runtime's pause (issue 36 item 2; loomcycle's /v1/_pause, /v1/_resume, /v1/_state): runs park
at their next iteration boundary — never between a tool_use and its result — new runs answer 503
`runtime_paused`, a run woken while paused parks again, resume continues every run where it was;
a resume that raced a park, or died half way, loses no run. Each test has a database of its own:
the pause is runtime-wide."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.support.tenancy import api, bearer, mint
from tests.support.waiting import answer, asker, events, start, status, types
from treadle.engine.replay import replay
from treadle.testing import until

LOOPER: dict[str, Any] = {"model": "tool-caller", "tools": ["Memory"], "mock": {"tool_calls": 3}}


def _no_open_tool_use(evs: list[Any]) -> None:
    assert replay([(e.seq, e.type, e.payload) for e in evs]).pending == []


async def _pausing(rt: Any) -> bool:
    return bool((await rt.pause.read()).state == "pausing")


async def _state(c: Any) -> dict[str, Any]:
    r = await c.get("/v1/_state")
    assert r.status_code == 200, r.text
    return dict(r.json())


async def test_pause_parks_runs_at_a_boundary_refuses_new_ones_and_resume_continues_them(
    open_runtime: Any, migrated_db_url: str,
) -> None:
    rt, disp = await open_runtime({"looper": LOOPER, "asker": asker()}, url=migrated_db_url)
    looper, parked = await start(rt, "looper"), await start(rt, "asker")
    await rt.engine.handle(disp.queue.pop(0))  # the looper's iteration 1: a tool call and its result
    await rt.engine.handle(disp.queue.pop(0))  # the asker parks on its question
    async with api(rt) as c:
        assert await _state(c) == {"state": "running", "paused_runs_count": 0, "active_runs_count": 1}
        pausing = asyncio.create_task(c.post("/v1/_pause", json={"timeout_ms": 20_000}))
        await until(lambda: _pausing(rt), what="the pause declared")
        assert (await _state(c))["state"] == "pausing"
        r = await c.post("/v1/runs", json={"agent": "looper", "prompt": "new"})
        assert r.status_code == 503 and r.json()["code"] == "runtime_paused", r.text
        r = await c.post("/v1/_pause", json={})
        assert r.status_code == 409 and r.json()["code"] == "already_pausing"
        await disp.drain()  # the looper's next step parks at its top
        r = await pausing
        assert r.status_code == 200, r.text
        out = r.json()
        assert out["state"] == "paused" and out["paused_runs_count"] == 1 and out["force_cancelled_count"] == 0
        assert "warnings" not in out and out["duration_ms"] >= 0
        assert await status(rt, looper) == "waiting" and await status(rt, parked) == "waiting"
        evs = await events(rt, looper)
        assert types(evs)[-1] == "runtime_paused" and evs[-1].payload == {"since_turn": 1}
        _no_open_tool_use(evs)

        await answer(rt, parked, "yes")  # woken while paused: its step parks again, at its top
        await disp.drain()
        assert types(await events(rt, parked))[-1] == "runtime_paused"
        assert await _state(c) == {"state": "paused", "paused_runs_count": 2, "active_runs_count": 0}

        r = await c.post("/v1/_resume")
        assert r.status_code == 200 and r.json() == {"state": "running", "resumed_runs_count": 2}, r.text
        r = await c.post("/v1/_resume")
        assert r.status_code == 409 and r.json()["code"] == "not_paused"
        await disp.drain()
        assert await status(rt, looper) == "completed" and await status(rt, parked) == "completed"
        evs = await events(rt, looper)
        assert [e.payload["iteration"] for e in evs if e.type == "tool_call"] == [1, 2, 3]  # went on where it was
        assert len([e for e in evs if e.type == "tool_result"]) == 3
        assert (await c.post("/v1/runs", json={"agent": "looper", "prompt": "new"})).status_code == 202
        assert await _state(c) == {"state": "running", "paused_runs_count": 0, "active_runs_count": 1}


async def test_a_pause_that_times_out_is_paused_and_the_late_runs_park_at_their_next_boundary(
    open_runtime: Any, migrated_db_url: str,
) -> None:
    rt, disp = await open_runtime({"looper": LOOPER}, url=migrated_db_url)
    run_id = await start(rt, "looper")
    async with api(rt) as c:
        r = await c.post("/v1/_pause", json={"timeout_ms": 50})  # no worker takes the queued step
        assert r.status_code == 200, r.text
        out = r.json()
        assert out["state"] == "paused" and out["paused_runs_count"] == 0
        assert out["warnings"] == ["1 run(s) had not reached an iteration boundary within the timeout; each parks "
                                   "at its next one"]
        await disp.drain()
        assert await status(rt, run_id) == "waiting"
        assert types(await events(rt, run_id)) == ["user_input", "started", "runtime_paused"]
        assert await _state(c) == {"state": "paused", "paused_runs_count": 1, "active_runs_count": 0}
        assert (await c.post("/v1/_resume")).json()["resumed_runs_count"] == 1
    await disp.drain()
    assert await status(rt, run_id) == "completed"


async def test_a_resume_racing_a_park_loses_no_run(open_runtime: Any, migrated_db_url: str) -> None:
    """The step saw the runtime paused (its lease) and reads the pause key's version; the resume
    lands before its park commits: the commit finds the key moved and the run goes on."""
    rt, disp = await open_runtime({"looper": LOOPER}, url=migrated_db_url)
    run_id = await start(rt, "looper")
    assert await rt.pause.begin(30)
    assert await rt.pause.settle(force=True)
    real = rt.engine.pause.paused

    async def paused_then_resumed() -> bool:
        seen = await real()
        assert (await rt.pausing.resume())["state"] == "running"  # after the check, before the commit
        return bool(seen)

    rt.engine.pause.paused = paused_then_resumed
    await rt.engine.handle(disp.queue.pop(0))
    rt.engine.pause.paused = real
    assert await status(rt, run_id) == "running"  # not parked: its next step is queued
    await disp.drain()
    assert await status(rt, run_id) == "completed"


async def test_a_resume_that_died_half_way_is_finished_by_the_sweeper(open_runtime: Any, migrated_db_url: str) -> None:
    rt, disp = await open_runtime({"looper": LOOPER}, url=migrated_db_url)
    run_id = await start(rt, "looper")
    assert await rt.pause.begin(30)
    await disp.drain()
    assert await rt.pause.settle() and await status(rt, run_id) == "waiting"
    async with rt.pool.connection() as conn:  # the resume's first transaction, and then a crash
        await conn.execute("UPDATE runtime_state SET state = 'running'")
    assert await rt.wake_due() == 1
    await disp.drain()
    assert await status(rt, run_id) == "completed"


async def test_a_pausing_whose_caller_died_settles_on_read(open_runtime: Any, migrated_db_url: str) -> None:
    rt, disp = await open_runtime({"looper": LOOPER}, url=migrated_db_url)
    await start(rt, "looper")
    assert await rt.pause.begin(30)  # declared; the caller never waited
    assert (await rt.pausing.state())["state"] == "pausing"
    await disp.drain()  # the run parks: nothing is active any more
    assert await rt.pausing.state() == {"state": "paused", "paused_runs_count": 1, "active_runs_count": 0}
    assert (await rt.pausing.resume())["resumed_runs_count"] == 1


async def test_only_the_operator_pauses_and_the_mcp_tools_do_what_the_routes_do(
    open_runtime: Any, migrated_db_url: str,
) -> None:
    from treadle.api.mcp.tools import call_tool
    from treadle.security.principal import Principal

    rt, _disp = await open_runtime({"looper": LOOPER}, url=migrated_db_url, auth_cache_seconds=0)
    async with api(rt) as c:
        operator = bearer(await mint(c, {}, "operator"))
        acme = bearer(await mint(c, operator, "acme", tenant="acme", scopes=["substrate:admin"]))
        for method, path in (("POST", "/v1/_pause"), ("POST", "/v1/_resume"), ("GET", "/v1/_state")):
            r = await c.request(method, path, headers=acme)
            assert r.status_code == 403 and r.json()["code"] == "insufficient_scope", (path, r.text)
    who = Principal("default", "operator")
    got = await call_tool(rt, who, "pause_runtime", {"timeout_ms": 1000})
    assert not got.is_error and got.structured_content is not None
    assert got.structured_content["state"] == "paused"
    got = await call_tool(rt, who, "get_runtime_state", {})
    assert got.structured_content == {"state": "paused", "paused_runs_count": 0, "active_runs_count": 0}
    refused = await call_tool(rt, who, "spawn_run", {"agent": "looper", "prompt": "x", "timeout_ms": 0})
    assert refused.is_error and refused.structured_content is not None
    assert refused.structured_content["code"] == "runtime_paused"
    got = await call_tool(rt, who, "resume_runtime", {})
    assert got.structured_content == {"state": "running", "resumed_runs_count": 0}
    tenant_admin = Principal("acme", "a")
    got = await call_tool(rt, tenant_admin, "pause_runtime", {})
    assert got.is_error and got.structured_content is not None
    assert got.structured_content["code"] == "insufficient_scope"
