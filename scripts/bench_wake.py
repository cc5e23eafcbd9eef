#!/usr/bin/env python
"""Wake benchmark: N runs parked on a channel hold nothing; how fast does a publish wake a run?

Parks N runs (Channel.subscribe with a long wait) on one channel, measures the CPU the process and
Postgres spend while they wait, then, with all N still parked, parks probe runs one at a time on
their own channel and measures publish → next step start (wake-to-step) p50/p99. Finally one
publish wakes all N and the time until every one has finished is printed.

    .venv/bin/python scripts/bench_wake.py --parked 10000 --probes 200 --workers 4
Uses $DATABASE_URL if set, else the embedded Postgres under .treadle/bench.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import resource
import sys
import time
from pathlib import Path
from typing import Any

from bench_support import pct, scratch_database, seam
from treadle.config import Settings, parse_config
from treadle.engine.workers import Sweeper, WorkerPool
from treadle.runtime import Runtime
from treadle.store.runs import NewRun

ROOT = Path(__file__).resolve().parent.parent
SEGMENTS = [{"role": "user", "content": [{"type": "trusted-text", "text": "wait"}]}]


def listener(channel: str) -> dict[str, Any]:
    return {
        "model": "script",
        "tools": ["Channel"],
        "mock": {
            "script": [
                {"tool": "Channel", "input": {"op": "subscribe", "channel": channel, "wait_ms": 86_400_000}},
                {"text": "woken"},
            ]
        },
    }


async def count(rt: Runtime, tenant: str, status: str) -> int:
    async with rt.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT count(*) AS n FROM runs WHERE tenant_id = %s AND status = %s", (tenant, status)
        )
        row = await cur.fetchone()
    return int(row["n"]) if row else 0


async def wait_for(rt: Runtime, tenant: str, status: str, n: int, timeout: float) -> float:
    t0 = time.perf_counter()
    while await count(rt, tenant, status) < n:
        if time.perf_counter() - t0 > timeout:
            raise TimeoutError(f"{status}: fewer than {n} runs after {timeout} s")
        await asyncio.sleep(0.02)
    return time.perf_counter() - t0


async def pg_cpu_ticks(rt: Runtime) -> float | None:
    """Total CPU seconds of this database's backends (Linux /proc), or None if unreadable."""
    async with rt.pool.connection() as conn:
        cur = await conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database()")
        pids = [r["pid"] for r in await cur.fetchall()]
    total = 0.0
    hz = os.sysconf("SC_CLK_TCK")
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / hz
        except (OSError, IndexError, ValueError):
            return None
    return total


async def bench(url: str, parked: int, probes: int, workers: int, idle_s: float) -> dict[str, Any]:
    agents = {"parked": listener("crowd"), "probe": listener("probe")}
    config = parse_config({"agents": agents, "channels": {"crowd": {}, "probe": {"semantic": "queue"}}})
    settings = Settings(database_url=url, home=ROOT / ".treadle" / "bench", workers=workers)
    rt = await Runtime.open(settings, config)
    step_started: dict[str, float] = {}
    original = seam(rt.engine, "_run_one", "one step under a lease: when a woken run's step starts")

    async def timed(lease: Any) -> Any:
        step_started.setdefault(lease.run.run_id, time.perf_counter())
        return await original(lease)

    rt.engine._run_one = timed  # type: ignore[method-assign]
    pool = WorkerPool(rt.engine, rt.dispatcher, workers)  # type: ignore[arg-type]
    sweeper = Sweeper(rt.engine, rt.dispatcher, settings.sweep_interval_seconds, wake_due=rt.wake_due)
    pool.start()
    sweeper.start()
    out: dict[str, Any] = {}
    try:
        t0 = time.perf_counter()
        for i in range(0, parked, 500):
            for _ in range(min(500, parked - i)):
                await rt.start_run(NewRun(tenant_id="crowd", agent="parked", segments=SEGMENTS))
        await wait_for(rt, "crowd", "waiting", parked, timeout=600)
        out["park_s"] = time.perf_counter() - t0

        cpu0, pg0, wall0 = resource.getrusage(resource.RUSAGE_SELF), await pg_cpu_ticks(rt), time.perf_counter()
        await asyncio.sleep(idle_s)
        cpu1, pg1, wall1 = resource.getrusage(resource.RUSAGE_SELF), await pg_cpu_ticks(rt), time.perf_counter()
        used = (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime)
        out["idle_cpu_pct"] = 100 * used / (wall1 - wall0)
        out["idle_pg_cpu_pct"] = None if pg0 is None or pg1 is None else 100 * (pg1 - pg0) / (wall1 - wall0)

        latencies: list[float] = []
        for i in range(probes):
            tenant = f"probe-{i % 8}"
            run, _ = await rt.start_run(NewRun(tenant_id=tenant, agent="probe", segments=SEGMENTS))
            while (await rt.runs.get(tenant, run.id)).status != "waiting":  # type: ignore[union-attr]
                await asyncio.sleep(0.002)
            step_started.pop(run.id, None)
            t_pub = time.perf_counter()
            await rt.publish(tenant, "probe", i)
            while run.id not in step_started:
                await asyncio.sleep(0.0005)
            latencies.append(step_started[run.id] - t_pub)
        out["wake_p50_ms"] = pct(latencies, 50) * 1000
        out["wake_p99_ms"] = pct(latencies, 99) * 1000
        out["wake_max_ms"] = max(latencies) * 1000

        t_all = time.perf_counter()
        woken = (await rt.publish("crowd", "crowd", "everyone"))["woken"]
        await wait_for(rt, "crowd", "completed", parked, timeout=900)
        out["wake_all_s"] = time.perf_counter() - t_all
        out["woken"] = woken
    finally:
        await sweeper.stop()
        await pool.stop()
        await rt.close()
    return out


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parked", type=int, default=10_000)
    ap.add_argument("--probes", type=int, default=200)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--idle-seconds", type=float, default=5.0)
    args = ap.parse_args()
    with scratch_database("treadle_wake") as url:
        r = await bench(url, args.parked, args.probes, args.workers, args.idle_seconds)
    print(f"# treadle wake benchmark — {time.strftime('%Y-%m-%d')}")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"{args.parked} parked runs, {args.workers} workers")
    print()
    print("| measure | value |")
    print("|---|---:|")
    print(f"| park {args.parked} runs (start → all waiting) | {r['park_s']:.1f} s |")
    print(f"| treadle process CPU while {args.parked} runs wait | {r['idle_cpu_pct']:.1f} % of one core |")
    pg = r["idle_pg_cpu_pct"]
    print(f"| Postgres backends CPU while they wait | {'n/a' if pg is None else f'{pg:.1f} %'} |")
    print(f"| wake-to-step p50 (one publish, {args.probes} probes) | {r['wake_p50_ms']:.2f} ms |")
    print(f"| wake-to-step p99 | {r['wake_p99_ms']:.2f} ms |")
    print(f"| wake-to-step max | {r['wake_max_ms']:.2f} ms |")
    print(f"| one publish wakes all {r['woken']}; all completed after | {r['wake_all_s']:.1f} s |")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
