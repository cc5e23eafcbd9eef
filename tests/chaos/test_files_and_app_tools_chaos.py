"""File tools and an application tool under chaos: two `treadle serve` replicas on one database
and one volumes directory, runs that Write, Edit (a replace_all whose new text holds its old one),
call an application tool the test answers over HTTP, Edit again and Read; while they run the
replicas are SIGKILLed (then restarted) and SIGSTOPped past their lease (then continued) in turn.

Every run must complete, and its final Read must show every edit exactly once (no lost, doubled or
undone file effect: a stalled worker's late write is refused, builtins/files/common.py).

Lost wakes are counted, not hidden by the client's retry: an answer the server stored while its run
still sleeps (`waiting`) past LOST_S is a lost wake (the answer's commit records its poke, and any
replica's sweeper does a poke lost to a crash within its period — LOST_S allows a stop's hold and a
lease besides). Only then does the test answer again, as a client retries; a call whose answer was
never stored (its request died with a replica) is answered again after a second.

TREADLE_CHAOS_FILE_RUNS sets how many runs (default 24): the faults scale with it (4 at 24 runs,
10 at 400), one at a time, each when the committed tool results pass its share of the first 2/3 of
the work; while faults remain the test keeps runs in flight (it starts more when few are left, and
checks them all), so every fault lands on unfinished runs."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.support.chaos import Db, Replica, write_config
from tests.support.e2e import check_paired, query
from treadle.testing import ACCEPT_JSON

pytestmark = pytest.mark.e2e

N_RUNS = int(os.environ.get("TREADLE_CHAOS_FILE_RUNS") or 24)
N_FAULTS = max(4, min(10, N_RUNS // 40))
TOP_UP = max(8, N_RUNS // 4)  # while faults remain, fewer unfinished runs than this: start this many more
LEASE_S = 2.0
HOLD_S = LEASE_S * 2.5  # a stop's hold: past its lease, so the other replica takes its runs over
LOST_S = HOLD_S + LEASE_S + 3.0  # a stored answer's run asleep longer than this: a lost wake
START = "title: draft\nbeta\nend\n"
EXPECTED_READ = "     1\ttitle: final\n     2\tbeta beta\n     3\tthe end"
LOOKUP = {"name": "lookup_order", "description": "Look an order up",
          "input_schema": {"type": "object", "properties": {"order_id": {"type": "string"}}}}
CONFIG = {
    "volumes": {"scratch": {"mode": "rw", "ephemeral": True, "default": True}},
    "agents": {"filer": {
        "model": "script", "tools": ["Write", "Edit", "Read"], "volumes": ["scratch"],
        "mock": {"latency_ms": 400, "script": [
            {"tool": "Write", "input": {"path": "doc.md", "content": START}},
            {"tool": "Edit", "input": {"path": "doc.md", "old_string": "draft", "new_string": "final"}},
            {"tool": "Edit", "input": {"path": "doc.md", "old_string": "beta", "new_string": "beta beta",
                                       "replace_all": True}},
            {"tool": "lookup_order", "input": {"order_id": "A-17"}},
            {"tool": "Edit", "input": {"path": "doc.md", "old_string": "end", "new_string": "the end"}},
            {"tool": "Read", "input": {"path": "doc.md"}},
            {"text": "done"},
        ]},
    }},
}
ENV = {"TREADLE_LEASE_SECONDS": str(LEASE_S), "TREADLE_SWEEP_INTERVAL_SECONDS": "0.25",
       "TREADLE_REQUEUE_AFTER_SECONDS": "2", "TREADLE_WORKERS": "4", "TREADLE_CHAIN_STEPS": "1"}
TERMINAL = ("completed", "failed", "cancelled")
#: parked application-tool calls: whether the server holds an answer, and since when (s)
PARKED = """
SELECT w.run_id, w.tool_use_id, r.status, extract(epoch FROM now() - c.created_at) AS stored_for
FROM run_waits w JOIN runs r ON r.id = w.run_id
LEFT JOIN client_tool_results c ON c.run_id = w.run_id AND c.tool_use_id = w.tool_use_id
WHERE w.kind = 'client_tool' AND w.run_id = ANY(%s)
"""


@dataclass
class Answerer:
    """The application: answers each parked call once, again after a second when its answer was
    never stored, and again (a client's retry) when a stored answer has left its run asleep past
    LOST_S — that call is counted as a lost wake."""

    run_ids: list[str]
    posted: dict[str, float] = field(default_factory=dict)  # call -> when last posted
    posts: int = 0
    retries_unstored: int = 0
    lost_wakes: set[str] = field(default_factory=set)
    longest_asleep_s: float = 0.0  # a stored answer's run still waiting, the longest seen

    async def tick(self, db: Db, replicas: list[Replica]) -> None:
        live = [r for r in replicas if r.running and not r.stopped]
        now = time.monotonic()
        todo: list[tuple[str, str]] = []
        for row in await db.query(PARKED, (self.run_ids,)):
            key = f"{row['run_id']}/{row['tool_use_id']}"
            if row["stored_for"] is not None:
                if row["status"] != "waiting":
                    continue  # woken; its step is on its way
                asleep = float(row["stored_for"])
                self.longest_asleep_s = max(self.longest_asleep_s, asleep)
                if asleep < LOST_S or now - self.posted.get(key, -1e9) < LOST_S:
                    continue
                self.lost_wakes.add(key)  # the store kept the answer and nothing woke the run
            elif key in self.posted:
                if now - self.posted[key] < 1.0:
                    continue
                self.retries_unstored += 1  # the request died with its replica
            todo.append((row["run_id"], row["tool_use_id"]))
        if not live or not todo:
            return
        clients = [httpx.AsyncClient(headers=ACCEPT_JSON, base_url=r.url, timeout=5) for r in live]
        gate = asyncio.Semaphore(16)

        async def post(i: int, run_id: str, tool_use_id: str) -> None:
            self.posted[f"{run_id}/{tool_use_id}"] = time.monotonic()
            self.posts += 1
            async with gate:
                with contextlib.suppress(httpx.HTTPError):
                    await clients[i % len(clients)].post(f"/v1/runs/{run_id}/tool_results",
                                                         json={"tool_use_id": tool_use_id, "content": "shipped"})

        try:
            await asyncio.gather(*(post(i, *call) for i, call in enumerate(todo)))
        finally:
            for c in clients:
                await c.aclose()


async def tool_results(db: Db, run_ids: list[str]) -> int:
    return await db.scalar("SELECT count(*) FROM events WHERE type = 'tool_result' AND run_id = ANY(%s)", (run_ids,))


async def test_file_and_application_tools_under_kill_and_stall(migrated_db_url: str, tmp_path: Path) -> None:
    url = migrated_db_url
    config = write_config(tmp_path / "treadle.yaml", CONFIG)
    a = Replica(name="a", database_url=url, config_path=config, workdir=tmp_path, env=ENV)
    b = Replica(name="b", database_url=url, config_path=config, workdir=tmp_path, env=ENV)
    replicas = [a, b]
    run_ids: list[str] = []
    faults: list[str] = []
    answerer = Answerer(run_ids)
    gate = asyncio.Semaphore(16)
    pending: set[int] = set()  # runs being started
    total = N_RUNS * 6
    # kill a, stop b, kill b, stop a, …: each when the results pass its share of the first 2/3 of the
    # work, one at a time (never while a stopped replica is held or a killed one is not serving again)
    plan = [("kill" if i % 2 == 0 else "stop", replicas[(i + 1) // 2 % 2], total * (i + 1) // (N_FAULTS * 3 // 2 + 1))
            for i in range(N_FAULTS)]

    async def start(count: int) -> None:
        """`count` more runs, through the replicas that serve (a start that meets a fault is sent
        again, to the other replica, under the same idempotency key)."""
        first = len(run_ids) + len(pending)
        pending.update(range(first, first + count))

        async def one(i: int) -> None:
            async with gate:
                for attempt in range(40):
                    live = [r for r in replicas if r.running and not r.stopped]
                    with contextlib.suppress(httpx.HTTPError):
                        async with httpx.AsyncClient(headers=ACCEPT_JSON, base_url=live[(i + attempt) % len(live)].url,
                                                     timeout=30) as c:
                            resp = await c.post("/v1/runs", headers={"Idempotency-Key": f"chaos-{i}"}, json={
                                "agent": "filer", "prompt": f"edit {i}", "client_tools": [LOOKUP]})
                        assert resp.status_code == 202, resp.text
                        run_ids.append(str(resp.json()["run_id"]))
                        pending.discard(i)
                        return
                    await asyncio.sleep(0.5)
            raise AssertionError(f"run {i} could not be started")

        await asyncio.gather(*(one(i) for i in range(first, first + count)))

    async def in_flight(db: Db) -> int:
        """Runs started or being started, not finished."""
        return len(pending) + len(run_ids) - await db.scalar(
            "SELECT count(*) FROM runs WHERE id = ANY(%s) AND status = ANY(%s)", (run_ids, list(TERMINAL)))

    async def answering(done: asyncio.Event) -> None:
        async with Db(url, "chaos-answers") as db:
            while not done.is_set():
                await answerer.tick(db, replicas)
                await asyncio.sleep(0.1)

    async def faulting() -> None:
        """The fault plan, on its own loop (answering hundreds of calls must not delay a fault)."""
        async with Db(url, "chaos-faults") as db:
            while plan:
                await asyncio.sleep(0.1)
                done, left = await tool_results(db, run_ids), await in_flight(db)
                if left < TOP_UP:
                    await start(TOP_UP)  # faults remain: keep runs in flight for them (all are checked)
                    left += TOP_UP
                if done < plan[0][2]:
                    continue
                kind, victim, _ = plan.pop(0)
                faults.append(f"{kind} {victim.name} at {done}/{total} results ({left} runs unfinished)")
                if kind == "kill":
                    victim.kill9()
                    victim.start()  # answers posted to it while it starts are posted again
                    await victim.wait_ready()
                else:
                    victim.sigstop()
                    await asyncio.sleep(HOLD_S)  # past its lease: the other replica takes its runs over
                    victim.sigcont()

    t0 = time.monotonic()
    for r in replicas:
        r.start()
    stopping = asyncio.Event()
    tasks: list[asyncio.Task[None]] = []
    try:
        for r in replicas:
            await r.wait_ready()
        tasks = [asyncio.create_task(answering(stopping)), asyncio.create_task(faulting())]
        await start(N_RUNS)
        async with Db(url) as db:
            deadline = time.monotonic() + 120 + N_RUNS
            while plan or await in_flight(db):
                assert time.monotonic() < deadline, (f"runs unfinished after {time.monotonic() - t0:.0f} s", faults)
                for task in tasks:
                    if task.done():
                        task.result()  # (raises what failed in it)
                await asyncio.sleep(0.2)
    finally:
        stopping.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for r in replicas:
            if r.stopped:
                r.sigcont()
            r.stop()
    elapsed = time.monotonic() - t0

    runs = await query(url, "SELECT id, status, stop_reason FROM runs WHERE id = ANY(%s)", (run_ids,))
    unfinished = [r for r in runs if r["status"] != "completed"]
    assert not unfinished, (f"{len(unfinished)} run(s) not completed {unfinished[:5]} {faults}",
                            a.log_tail(), b.log_tail())
    wrong = []
    for run_id in run_ids:
        events = await query(url, "SELECT seq, type, payload, tool_use_id FROM events WHERE run_id = %s ORDER BY seq",
                             (run_id,))
        results = [e["payload"] for e in events if e["type"] == "tool_result"]
        texts = [r["text"] for r in results]
        if [r["is_error"] for r in results] != [False] * 6 or texts[-1] != EXPECTED_READ or texts[3] != "shipped":
            wrong.append((run_id, texts))
        paired = check_paired([{"seq": e["seq"], "type": e["type"], "_tuid": e["tool_use_id"], **e["payload"]}
                               for e in events])
        if paired:
            wrong.append((run_id, paired))
    summary = (f"{len(run_ids)} runs, {len(run_ids) * 6} tool results in {elapsed:.0f} s;"
               f" faults {len(faults)}/{N_FAULTS}:"
               f" {faults}; answers posted {answerer.posts} ({answerer.retries_unstored} again after a lost request);"
               f" lost wakes {len(answerer.lost_wakes)}; longest a stored answer's run slept"
               f" {answerer.longest_asleep_s:.2f} s; runs with a lost, doubled or undone effect {len(wrong)}")
    print(summary)
    assert not wrong, (f"{len(wrong)} of {len(run_ids)} runs with a lost, doubled or undone effect: {wrong[:3]}",
                       summary)
    assert not answerer.lost_wakes, (sorted(answerer.lost_wakes)[:5], summary)
    assert len(faults) == N_FAULTS, summary  # every fault landed while runs were in flight
