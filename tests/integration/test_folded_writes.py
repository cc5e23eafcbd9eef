"""A transactional call folded into the step's commit statement (store/folding.py): `Memory.incr`,
the turn's one transactional call, is written by the commit itself — one round trip — and answers
exactly as the call would; a value that is not an integer is an error that writes nothing; a
folded write the database refuses runs as an ordinary call, which reports the error."""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

import psycopg
import pytest

from tests.support.folds import recording_folds
from treadle.store.folding import FoldedWrite, FoldFailed
from treadle.store.memory import INCR, incr_params
from treadle.store.runs import NewRun
from treadle.store.steps import StepOutcome, WaitSpec
from treadle.testing import until
from treadle.tools.base import ToolResult

TENANT = f"t_fold_{secrets.token_hex(4)}"
KEYS = ["calls", "naïve ключ ☃", 'quote " and \\ backslash', "tab\tnewline\n", "emoji 🧵"]


def incr_agent(key: str, times: int = 1, delta: int = 1) -> dict[str, Any]:
    call = {"tool": "Memory", "input": {"op": "incr", "scope": "agent", "key": key, "delta": delta}}
    return {"model": "script", "tools": ["Memory"], "mock": {"script": [call] * times + [{"text": "done"}]}}


async def run(rt: Any, disp: Any, agent: str) -> list[dict[str, Any]]:
    r, _ = await rt.start_run(NewRun(tenant_id=TENANT, agent=agent, segments=[
        {"role": "user", "content": [{"type": "trusted-text", "text": "count"}]}]))
    await disp.drain()
    stored = await rt.runs.get(TENANT, r.id)
    assert stored is not None and stored.status == "completed", stored
    return [e.payload for e in await rt.runs.events(TENANT, r.id) if e.type == "tool_result"]


async def test_a_folded_incr_answers_as_the_call_would(open_runtime: Any) -> None:
    agents = {f"k{i}": incr_agent(key, times=3, delta=i - 2) for i, key in enumerate(KEYS)}
    rt, disp = await open_runtime(agents, chain_steps=2)
    folded = recording_folds(rt)
    for i, key in enumerate(KEYS):
        results = await run(rt, disp, f"k{i}")
        # the text `invoke` gives (ToolResult.json), for the values the calls left
        assert [(r["text"], r["is_error"]) for r in results] == [
            (ToolResult.json({"key": key, "value": (i - 2) * n}).content, False) for n in (1, 2, 3)]
        assert await rt.memory.get(TENANT, "agent", f"k{i}", key) == (True, (i - 2) * 3)
    assert len(folded) == 3 * len(KEYS)  # every call was folded


async def test_a_value_that_is_not_an_integer_is_an_error_and_is_left_untouched(open_runtime: Any) -> None:
    rt, disp = await open_runtime({"word": incr_agent("w")})
    folded = recording_folds(rt)
    await rt.memory.set(TENANT, "agent", "word", "w", "abc", None)
    async with rt.pool.connection() as conn:
        cur = await conn.execute("SELECT updated_at FROM memory WHERE tenant_id = %s AND key = 'w'", (TENANT,))
        before = (await cur.fetchone())["updated_at"]
        [result] = await run(rt, disp, "word")
        cur = await conn.execute("SELECT value, updated_at FROM memory WHERE tenant_id = %s AND key = 'w'", (TENANT,))
        after = await cur.fetchone()
    assert (result["text"], result["is_error"]) == ("Memory.incr: the value at 'w' is not an integer", True)
    assert (after["value"], after["updated_at"]) == ("abc", before) and len(folded) == 1


async def test_a_folded_write_the_database_refuses_runs_as_a_call(open_runtime: Any) -> None:
    rt, disp = await open_runtime({"big": incr_agent("b", times=2)})
    folded = recording_folds(rt)
    await rt.memory.set(TENANT, "agent", "big", "b", 2**63 - 1, None)  # the next incr overflows a bigint
    results = await run(rt, disp, "big")
    assert len(folded) == 2 and all(r["is_error"] for r in results)
    assert all("out of range" in r["text"] for r in results), results
    assert await rt.memory.get(TENANT, "agent", "big", "b") == (True, 2**63 - 1)  # nothing written


async def test_a_folded_commit_that_lost_its_lease_writes_nothing(open_runtime: Any, db_url: str) -> None:
    """The fence fails the commit statement, and with it the folded write."""
    rt, disp = await open_runtime({"lost": incr_agent("l")})
    folded = recording_folds(rt)
    inner = rt.engine.steps.commit

    async def stolen(leased: Any, owner: str, events: Any, outcome: Any, **kw: Any) -> Any:
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as other:  # another worker took it
            await other.execute("UPDATE runs SET lease_owner = 'thief' WHERE id = %s", (leased.run_id,))
        rt.engine.steps.commit = inner
        return await inner(leased, owner, events, outcome, **kw)

    rt.engine.steps.commit = stolen
    r, _ = await rt.start_run(NewRun(tenant_id=TENANT, agent="lost", segments=[
        {"role": "user", "content": [{"type": "trusted-text", "text": "count"}]}]))
    await disp.drain()
    events = await rt.runs.events(TENANT, r.id)
    assert len(folded) == 1 and [e.type for e in events if e.type == "tool_result"] == []
    assert await rt.memory.get(TENANT, "agent", "lost", "l") == (False, None)
    stored = await rt.runs.get(TENANT, r.id)
    assert stored is not None and (stored.status, stored.lease_owner, stored.iterations) == ("running", "thief", 0)


async def test_a_commit_that_cannot_carry_a_folded_write_refuses_it(open_runtime: Any) -> None:
    """A step that parks commits in a transaction of its own (no pipelined statement to carry the
    write): it refuses the folded write, and the engine runs the call instead — never drops it."""
    rt, _ = await open_runtime({"park": incr_agent("p")})
    steps = rt.engine.steps
    r, _ = await rt.start_run(NewRun(tenant_id=TENANT, agent="park", segments=[
        {"role": "user", "content": [{"type": "trusted-text", "text": "count"}]}]))
    leased = await steps.lease(r.id, 0, "me")
    assert leased is not None
    write = FoldedWrite(INCR.format(returning="'x' AS text"), incr_params(TENANT, "agent", "park", "p", 1, None), "x")
    with pytest.raises(FoldFailed):
        async with steps.transaction():
            assert steps.fold("tu1", write)
            await steps.commit(leased, "me", [], StepOutcome("waiting", waits=[WaitSpec("tu1", "channel", "k", 0)]))
    assert await rt.memory.get(TENANT, "agent", "park", "p") == (False, None)
    stored = await rt.runs.get(TENANT, r.id)
    assert stored is not None and (stored.status, stored.step_no) == ("running", 0)


async def test_a_cancel_does_not_wait_behind_a_folded_write(open_runtime: Any, db_url: str) -> None:
    """The folded write runs before the commit locks the run's row: while it waits (here for a
    memory row another transaction holds), a cancel flags the run at once, and the step then yields
    to it — the run ends cancelled, the write rolled back."""
    rt, disp = await open_runtime({"held": incr_agent("h")})
    await rt.memory.set(TENANT, "agent", "held", "h", 5, None)
    r, _ = await rt.start_run(NewRun(tenant_id=TENANT, agent="held", segments=[
        {"role": "user", "content": [{"type": "trusted-text", "text": "count"}]}]))
    async with await psycopg.AsyncConnection.connect(db_url) as holder:
        await holder.execute("SELECT 1 FROM memory WHERE tenant_id = %s AND key = 'h' FOR UPDATE", (TENANT,))
        stepping = asyncio.ensure_future(disp.drain())

        async def commit_waits_for_the_row() -> bool:
            # (pg_stat_activity is read once per transaction: the holder's would never change)
            async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as watcher:
                cur = await watcher.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s",
                    ("%tool AS (INSERT INTO memory%",))
                row = await cur.fetchone()
            return bool(row and row[0])

        await until(commit_waits_for_the_row, timeout=30, interval=0.02, what="the folded commit to wait")
        # a cancel that queued behind the commit for the run's row would never return while it waits
        await asyncio.wait_for(rt.cancel_run(TENANT, r.id, "stop"), timeout=30)
        await holder.rollback()
    await stepping
    await disp.drain()
    stored = await rt.runs.get(TENANT, r.id)
    assert stored is not None and stored.status == "cancelled", stored
    assert await rt.memory.get(TENANT, "agent", "held", "h") == (True, 5)
