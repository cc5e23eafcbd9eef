#!/usr/bin/env python
"""Cancel benchmark: from `Runtime.cancel_run` to the run's terminal status, while work is in flight.

A sidecar-like runtime in this process (Runtime.open, the Postgres queue, a WorkerPool). Cases:

1. model call in flight, `cancel_watch="notify"` (the sidecar: LISTEN treadle_cancel): agents whose
   mock model call takes 3 s; each run is cancelled a random 0.05-2.5 s after its model call
   started (the `Engine._call_model` seam marks the start — stricter than seeing the lease taken);
2. the same with `cancel_watch="poll"`, `cancel_poll_seconds=1.0` (the cloud shape);
3. a transactional tool in flight (notify): a Memory call made slow by a 1 s `pg_sleep` trigger on
   the memory table (as tests/e2e/test_crash.py does), cancelled 0.2 s after the tool started (the
   `ToolRunner.run_transactional` seam). A transactional tool runs inside the step transaction,
   which holds the run's row lock: the cancel statement itself waits for that commit;
4. baseline, same run: runs merely queued (started with no worker running, their jobs removed, so
   no step is in flight), then cancelled with idle workers: the cancel statement + its job + the
   one step that ends a queued run — the floor of any cancel on this queue. Its cancels are
   spread over 0-0.25 s, as the random delays spread the others.
Each runtime's connection pool is grown to its size before anything is timed.

Latency = from calling `rt.cancel_run` to reading the run's terminal status. The reader registers
with the in-process event hub before cancelling (the engine pokes it after every step, as it
does for SSE readers) and re-reads the row on each poke, else every 50 ms. Also printed: how long
the `cancel_run` call itself took (what an API client waits), how many runs ended `cancelled`, and
the iterations they had done (0: the model call was aborted; in the tool case 1 means the cancel
was seen right after the slow tool's step, 2 that one more tool step ran after the cancel).
Up to `--concurrency` probes are in flight at once. Seeded, so reruns cancel at the same moments.

    .venv/bin/python scripts/bench_cancel.py --runs 30 --concurrency 6
Uses $DATABASE_URL if set, else the embedded Postgres under .treadle/bench.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parent.parent

from bench_support import code_version, ms, pct, scratch_database, seam  # noqa: E402
from treadle.config import Settings, parse_config  # noqa: E402
from treadle.engine.workers import WorkerPool  # noqa: E402
from treadle.runtime import Runtime  # noqa: E402
from treadle.store.runs import NewRun  # noqa: E402

SEGMENTS = [{"role": "user", "content": [{"type": "trusted-text", "text": "hello"}]}]
TERMINAL = ("completed", "failed", "cancelled")
MODEL_MS = 3000
TOOL_SLEEP_S = 1.0
SLOW_MEMORY = f"""
CREATE OR REPLACE FUNCTION bench_slow_memory() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_sleep({TOOL_SLEEP_S});
    RETURN NEW;
END $$;
CREATE TRIGGER bench_slow_memory BEFORE INSERT ON memory FOR EACH ROW EXECUTE FUNCTION bench_slow_memory();
"""

AGENTS = {
    "slow_model": {"model": "echo", "mock": {"latency_ms": MODEL_MS}},
    # three tool turns, then text: a cancel that lands between two tool steps is seen by the next;
    # each run counts in its own row (one user per run), so runs never wait on each other's lock
    "slow_tool": {
        "model": "script",
        "tools": ["Memory"],
        "mock": {"script": [{"tool": "Memory", "input": {"op": "incr", "scope": "user", "key": "n"}}] * 3
                 + [{"text": "done"}]},
    },
}


class Marks:
    """Per run: an event set when the seam `name` starts for it (the first argument's run_id)."""

    def __init__(self, obj: Any, name: str, why: str) -> None:
        self.started: dict[str, asyncio.Event] = {}
        inner = seam(obj, name, why)

        async def marked(*a: Any, **kw: Any) -> Any:
            first = a[0]
            run_id = getattr(first, "run_id", None) or getattr(getattr(first, "leased", None), "run_id", None)
            if run_id is not None:
                self.event(run_id).set()
            return await inner(*a, **kw)

        setattr(obj, name, marked)

    def event(self, run_id: str) -> asyncio.Event:
        return self.started.setdefault(run_id, asyncio.Event())


async def status_of(rt: Runtime, run_id: str) -> tuple[str, int]:
    async with rt.pool.connection() as conn:
        cur = await conn.execute("SELECT status, iterations FROM runs WHERE id = %s", (run_id,))
        row = await cur.fetchone()
    return (str(row["status"]), int(row["iterations"])) if row else ("?", 0)


async def cancel_and_time(rt: Runtime, tenant: str, run_id: str) -> dict[str, Any]:
    """Cancel `run_id`; seconds until its row reads terminal, and how long cancel_run took."""
    with rt.hub.subscribe(run_id) as sub:
        t0 = time.perf_counter()
        await rt.cancel_run(tenant, run_id, "bench")
        t_call = time.perf_counter() - t0
        deadline = t0 + 30
        while True:
            status, iterations = await status_of(rt, run_id)
            if status in TERMINAL:
                return {"latency": time.perf_counter() - t0, "call": t_call, "status": status, "iterations": iterations}
            if time.perf_counter() > deadline:
                return {"latency": float("inf"), "call": t_call, "status": status, "iterations": iterations}
            await sub.wait(0.05)


async def probes(
    n: int, concurrency: int, one: Callable[[int], Awaitable[dict[str, Any]]]
) -> list[dict[str, Any]]:
    sem = asyncio.Semaphore(concurrency)

    async def bounded(i: int) -> dict[str, Any]:
        async with sem:
            return await one(i)

    return list(await asyncio.gather(*(bounded(i) for i in range(n))))


async def warm(rt: Runtime, n: int) -> None:
    """Grow the connection pool to `n` before timing anything (it opens with fewer)."""

    async def hold() -> None:
        async with rt.pool.inner.connection() as conn:
            await conn.execute("SELECT 1")
            await asyncio.sleep(0.2)

    await asyncio.gather(*(hold() for _ in range(n)))


def settings_for(url: str, workers: int, watch: str, poll_s: float) -> Settings:
    return Settings(database_url=url, home=ROOT / ".treadle" / "bench", workers=workers,
                    cancel_watch=watch, cancel_poll_seconds=poll_s)  # type: ignore[arg-type]


async def in_flight(url: str, n: int, concurrency: int, watch: str, poll_s: float, what: str,
                    seed: int) -> list[dict[str, Any]]:
    """Cancel `n` runs while their model call (what="model") or their first tool ("tool") runs."""
    rt = await Runtime.open(settings_for(url, concurrency + 2, watch, poll_s), parse_config({"agents": AGENTS}))
    if what == "model":
        marks = Marks(rt.engine, "_call_model", "the model call: a cancel is sent while it is in flight")
        agent = "slow_model"
    else:
        runner = seam(rt.engine, "runner", "the tool runner")
        marks = Marks(runner, "run_transactional", "transactional tools: a cancel is sent while one runs")
        agent = "slow_tool"
        async with rt.pool.connection() as conn:
            await conn.execute(SLOW_MEMORY)
    await warm(rt, concurrency + 2)
    rng = random.Random(seed)
    delays = [rng.uniform(0.05, 2.5) if what == "model" else 0.2 for _ in range(n)]
    pool = WorkerPool(rt.engine, rt.dispatcher, concurrency + 2)  # type: ignore[arg-type]
    pool.start()
    tenant = f"{what}_{watch}"

    async def one(i: int) -> dict[str, Any]:
        run, _ = await rt.start_run(NewRun(tenant_id=tenant, agent=agent, segments=SEGMENTS, user_id=f"u{i}"))
        await asyncio.wait_for(marks.event(run.id).wait(), 30)
        await asyncio.sleep(delays[i])
        return await cancel_and_time(rt, tenant, run.id)

    try:
        return await probes(n, concurrency, one)
    finally:
        await pool.stop()
        await rt.close()


async def queued_floor(url: str, n: int, concurrency: int, seed: int) -> list[dict[str, Any]]:
    """Cancel `n` runs that are queued with no step in flight, idle workers waiting."""
    rt = await Runtime.open(settings_for(url, concurrency + 2, "notify", 1.0), parse_config({"agents": AGENTS}))
    tenant = "queued"
    ids = []
    for _ in range(n):
        run, _ = await rt.start_run(NewRun(tenant_id=tenant, agent="slow_model", segments=SEGMENTS))
        ids.append(run.id)
    async with rt.pool.connection() as conn:  # no job: nothing runs them until the cancel sends one
        await conn.execute("DELETE FROM jobs WHERE run_id = ANY(%s)", (ids,))
    await warm(rt, concurrency + 2)
    pool = WorkerPool(rt.engine, rt.dispatcher, concurrency + 2)  # type: ignore[arg-type]
    pool.start()
    await asyncio.sleep(0.5)  # the workers are idle, listening
    rng = random.Random(seed)
    stagger = [rng.uniform(0.0, 0.25) for _ in range(n)]  # cancels spread out, as in the other cases

    async def one(i: int) -> dict[str, Any]:
        await asyncio.sleep(stagger[i])
        return await cancel_and_time(rt, tenant, ids[i])

    try:
        return await probes(n, concurrency, one)
    finally:
        await pool.stop()
        await rt.close()


def row(label: str, results: list[dict[str, Any]]) -> str:
    lat = [r["latency"] for r in results]
    calls = [r["call"] for r in results]
    cancelled = sum(r["status"] == "cancelled" for r in results)
    iters = [r["iterations"] for r in results]
    return (f"| {label} | {len(results)} | {ms(pct(lat, 50))} | {ms(pct(lat, 90))} | {ms(pct(lat, 99))} |"
            f" {ms(max(lat))} | {ms(pct(calls, 50))} | {ms(max(calls))} | {cancelled}/{len(results)} |"
            f" {min(iters)}-{max(iters)} |")


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=30, help="cancels per case")
    ap.add_argument("--tool-runs", type=int, default=12, help="cancels in the slow-tool case (0: skip it)")
    ap.add_argument("--concurrency", type=int, default=6, help="probes in flight at once")
    ap.add_argument("--poll-seconds", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()

    with scratch_database("treadle_cancel") as url:
        with psycopg.connect(url) as conn:
            version = conn.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
        floor_a = await queued_floor(url, args.runs, args.concurrency, args.seed)
        notify = await in_flight(url, args.runs, args.concurrency, "notify", args.poll_seconds, "model", args.seed)
        poll = await in_flight(url, args.runs, args.concurrency, "poll", args.poll_seconds, "model", args.seed)
        tool = (await in_flight(url, args.tool_runs, args.concurrency, "notify", args.poll_seconds, "tool", args.seed)
                if args.tool_runs else [])
        floor_b = await queued_floor(url, args.runs, args.concurrency, args.seed)

    where = "DATABASE_URL" if os.environ.get("DATABASE_URL") else "embedded pgserver (unix socket)"
    print(f"# treadle cancel benchmark — {time.strftime('%Y-%m-%d %H:%M')}")
    print(f"code: {code_version()}")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()},"
          f" PostgreSQL {version} ({where}); load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"{args.runs} cancels per case, {args.concurrency} in flight at once, {args.concurrency + 2} workers")
    print()
    print("| case | cancels | p50 ms | p90 ms | p99 ms | max ms | cancel_run call p50 ms | call max ms |"
          " ended cancelled | iterations done |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    print(row("baseline: queued run, no step in flight (before)", floor_a))
    print(row(f"model call in flight ({MODEL_MS / 1000:.0f} s), cancel_watch=notify", notify))
    print(row(f"model call in flight ({MODEL_MS / 1000:.0f} s), cancel_watch=poll every {args.poll_seconds:g} s",
              poll))
    if tool:
        print(row(f"transactional tool in flight (Memory + {TOOL_SLEEP_S:g} s pg_sleep, cancel 0.2 s in), notify",
                  tool))
    print(row("baseline: queued run, no step in flight (after)", floor_b))
    print()
    p99 = pct([r["latency"] for r in notify], 99)
    print(f"target p99 ≤ 200 ms with notify and a {MODEL_MS / 1000:.0f} s call in flight: {ms(p99)} ms —"
          f" {'met' if p99 <= 0.2 else 'NOT met'}")
    every = [*floor_a, *notify, *poll, *tool, *floor_b]
    return 0 if all(r["status"] in TERMINAL for r in every) else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
