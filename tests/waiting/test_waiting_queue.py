"""The same primitives on the sidecar's Postgres job queue with real workers: children, pokes and
wake-ups insert jobs in their own statements (jobs_in_db), and parked runs leave no job behind."""

from __future__ import annotations

from typing import Any

from tests.support.waiting import ECHO, answer, asker, result_json, spawner, start
from treadle.engine.waiting import input_key
from treadle.engine.workers import WorkerPool
from treadle.store.inputs import InputStore
from treadle.testing import until


async def wait_for(rt: Any, run_id: str, statuses: tuple[str, ...], timeout: float = 20.0) -> Any:
    async def settled() -> Any:
        run = await rt.runs.get("default", run_id)
        return run if run.status in statuses and run.lease_owner is None else None

    return await until(settled, timeout, interval=0.02, what=f"{run_id} to be {statuses} and unleased")


async def jobs(rt: Any) -> int:
    async with rt.pool.connection() as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM jobs")
        row = await cur.fetchone()
    return int(row["n"])


async def test_children_questions_and_input_on_the_postgres_queue(open_runtime: Any, migrated_db_url: str) -> None:
    agents = {
        "parent": spawner([{"name": "chat", "prompt": f"p{i}"} for i in range(5)] + [{"name": "asker", "prompt": "q"}],
                          max_concurrent_children=2),
        "chat": ECHO,
        "asker": asker(),
    }
    rt, queue = await open_runtime(agents, inline=False, url=migrated_db_url)
    workers = WorkerPool(rt.engine, queue, 4, idle_poll_s=0.05)
    workers.start()
    try:
        parent = await start(rt, "parent")
        chat = await start(rt, "chat", "hello", interactive=True)
        await wait_for(rt, chat, ("waiting",))
        async def asker_waits() -> Any:  # the five echo children finish; the asker child waits for its answer
            async with rt.pool.connection() as conn:
                cur = await conn.execute("SELECT id, agent, status FROM runs WHERE parent_run_id = %s", (parent,))
                kids = await cur.fetchall()
            [ask] = [k for k in kids if k["agent"] == "asker"] or [None]
            if ask is not None and ask["status"] == "waiting" and sum(k["status"] == "completed" for k in kids) == 5:
                return ask
            return None

        ask = await until(asker_waits, 20, interval=0.02, what="five children done and the asker waiting")
        await wait_for(rt, parent, ("waiting",))
        # three parked runs, no job, no worker busy: a wake that raced the parent's last step leaves
        # a stale job the workers consume and drop, so "none left" is waited for, not sampled once
        async def no_jobs() -> bool:
            return await jobs(rt) == 0

        await until(no_jobs, timeout=10, interval=0.02, what="the queue to drain")

        await answer(rt, ask["id"])
        await InputStore(rt.pool).add("default", chat, "input", "again")
        await rt.poke("default", [input_key(chat)])
        run = await wait_for(rt, parent, ("completed",))
        assert run.stop_reason == "end_turn"
        results = result_json(await rt.runs.events("default", parent))
        assert [r["ok"] for r in results] == [True] * 6
        assert [r["output"] for r in results] == ["p0", "p1", "p2", "p3", "p4", "asked"]
        async def asked_twice() -> bool:
            return [e.type for e in await rt.runs.events("default", chat)].count("awaiting_input") >= 2

        await until(asked_twice, 20, interval=0.02, what="the chat to ask for input a second time")
        await wait_for(rt, chat, ("waiting",))
        await rt.cancel_run("default", chat, "bye")
        await wait_for(rt, chat, ("cancelled",))
    finally:
        await workers.stop()
