#!/usr/bin/env python
"""Retention under load (issue 42 item 4): does deleting expired data in batches slow live work?

Workload: `--runs` runs x `--iterations` iterations (one `Memory.incr` per iteration, the mock
model answering at once) on the Postgres queue with `--workers` in-process workers, each step
timed (`Engine._run_one`: lease held → commit). Two kinds of pass, alternating for `--rounds`:
`off` — the load alone; `on` — the same load while a task calls `Runtime.enforce_retention(force=True)`
back to back (the sweeper's call, without its once-a-minute pause) over `--events` expired events
seeded beforehand (finished runs of another tenant, 10 events each, ended 40 days ago, retention
30 days): 500 run trees (5,000 events) per batch, `FOR UPDATE SKIP LOCKED`. The table gives each
pass's step p50/p99, the events retention deleted while the load ran, and the ratio of the `on`
passes' p99 to the `off` passes' (the issue's bound: 1.5x).

    .venv/bin/python scripts/bench_retention.py --events 100000 --workers 4
Uses $DATABASE_URL if set, else the embedded Postgres under .treadle/bench."""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_support import drive_to_completion, pct, scratch_database  # noqa: E402
from treadle.config import Settings, parse_config  # noqa: E402
from treadle.domain.events import EventType  # noqa: E402
from treadle.engine.workers import WorkerPool  # noqa: E402
from treadle.runtime import Runtime  # noqa: E402
from treadle.store.runs import NewRun  # noqa: E402


def config(iterations: int, archive: bool = False) -> dict[str, Any]:
    per_run = {"op": "incr", "scope": "user", "key": "calls"}
    retention: dict[str, Any] = {"days": 30, **({"archive": {"volume": "vault"}} if archive else {})}
    return {"retention": retention, **({"volumes": {"vault": {}}} if archive else {}), "agents": {"bench": {
        "model": "script", "tools": ["Memory"], "max_iterations": iterations,
        "mock": {"script": [{"tool": "Memory", "input": per_run}] * iterations + [{"text": "done"}]}}}}


async def seed_expired(rt: Any, events: int, tag: str) -> None:
    runs = events // 10
    async with rt.pool.connection() as conn:
        await conn.execute(
            "INSERT INTO runs (id, root_run_id, tenant_id, agent, status, stop_reason, completed_at, created_at,"
            " last_seq) SELECT %(tag)s || g, %(tag)s || g, 'expired', 'bench', 'completed', 'end_turn',"
            " now() - interval '40 days',"
            " now() - interval '41 days', 10 FROM generate_series(1, %(n)s) g", {"tag": tag, "n": runs})
        await conn.execute(
            "INSERT INTO events (run_id, seq, tenant_id, type, payload, created_at)"
            f" SELECT %(tag)s || g, s, 'expired', '{EventType.TEXT}', jsonb_build_object('text', repeat('x', 200)),"
            " now() - interval '41 days' FROM generate_series(1, %(n)s) g, generate_series(1, 10) s",
            {"tag": tag, "n": runs})
        await conn.execute("ANALYZE runs")
        await conn.execute("ANALYZE events")


async def one_pass(rt: Any, args: argparse.Namespace, tenant: str, retention: bool) -> dict[str, Any]:
    steps: list[float] = []
    inner = rt.engine._run_one

    async def timed(lease: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return await inner(lease)
        finally:
            steps.append(time.perf_counter() - t0)

    rt.engine._run_one = timed
    segments = [{"role": "user", "content": [{"type": "trusted-text", "text": "go"}]}]
    for i in range(args.runs):
        await rt.start_run(NewRun(tenant_id=tenant, agent="bench", segments=segments, user_id=f"u{i}"))
    deleted_runs = 0
    batches = 0
    load_done = asyncio.Event()

    async def sweep() -> None:
        nonlocal deleted_runs, batches
        while not load_done.is_set():
            n = await rt.enforce_retention(force=True)
            if n == 0:
                break
            deleted_runs += n
            batches += 1

    sweeper = asyncio.create_task(sweep()) if retention else None
    pool = WorkerPool(rt.engine, rt.dispatcher, args.workers, idle_poll_s=0.01)
    done = await drive_to_completion(rt, pool, tenant)
    load_done.set()
    if sweeper is not None:
        await sweeper
        while await rt.enforce_retention(force=True):  # the rest, after the load (not timed)
            pass
    rt.engine._run_one = inner
    return {"p50": pct(steps, 50), "p99": pct(steps, 99), "steps": len(steps), "elapsed": done["elapsed"],
            "events_deleted": deleted_runs * 10, "batches": batches}


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--archive", action="store_true",
                    help="retention.archive: each batch written as JSON Lines to a host volume before it is deleted")
    args = ap.parse_args()
    with scratch_database("bench_retention") as url:
        settings = Settings(database_url=url, home=ROOT / ".treadle" / "bench", workers=args.workers, chain_steps=1)
        rt = await Runtime.open(settings, parse_config(config(args.iterations, args.archive)))
        try:
            await one_pass(rt, argparse.Namespace(**{**vars(args), "runs": 50}), "warmup", False)
            rows: list[tuple[str, dict[str, Any]]] = []
            for r in range(args.rounds):
                for mode in (("off", "on") if r % 2 == 0 else ("on", "off")):
                    if mode == "on":
                        await seed_expired(rt, args.events, f"x{r}-")
                    rows.append((mode, await one_pass(rt, args, f"load{r}{mode}", mode == "on")))
        finally:
            await rt.close()
    print(f"\nretention{' (archived first)' if args.archive else ''} under load: {args.runs} runs x"
          f" {args.iterations} iterations, {args.workers} workers;"
          f" {args.events:,} expired events seeded before each 'on' pass\n")
    print("| pass | steps | step p50 | step p99 | load s | events deleted during the load | batches |")
    print("|---|---|---|---|---|---|---|")
    for mode, x in rows:
        print(f"| {mode} | {x['steps']} | {x['p50'] * 1000:.2f} ms | {x['p99'] * 1000:.2f} ms | {x['elapsed']:.2f} |"
              f" {x['events_deleted']:,} | {x['batches']} |")
    off = statistics.median(x["p99"] for m, x in rows if m == "off")
    on = statistics.median(x["p99"] for m, x in rows if m == "on")
    print(f"\np99 with retention / without: {on / off:.2f}x (bound: 1.5x)")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
