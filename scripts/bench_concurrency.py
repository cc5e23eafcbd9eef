#!/usr/bin/env python
"""Concurrency benchmark (issue 32): many agent runs bound by model latency, in one sidecar process.

Workload: N runs started at once, each 5 iterations (4 `Memory.incr` tool calls on the run's own
user-scoped row, then a final text), on the mock provider answering after `--latency-ms` (1,000)
plus a uniform jitter of `--jitter-ms` (200); one process with the sidecar's in-process workers on
the Postgres queue, **default settings** (workers, pool, chain) unless flags say otherwise; the
database's own `max_connections` untouched. Each size runs for at most `--window` seconds: the
figures are rates over the pass, so a pass that cannot finish still says how fast it went.

Printed per size:
- runs/s and iterations/s (completed runs and iterations the database counts, over the pass);
- in-flight model calls: the peak number of model calls awaiting their answer at once;
- peak DB connections: the process's backends in `pg_stat_activity`, sampled every 0.25 s;
- step - model p50/p99: each step's time from the lease to its commit minus its model call's
  time (what treadle itself costs a step: claim, replay, tools, commit, queueing for a connection);
- RSS per in-flight run: (peak RSS - RSS before the pass) / peak in-flight runs (leased steps).

The order check (`--backlog`, 1000): that many runs start at once; the first `--first` (100)
started should finish within 2x their unloaded time (one run alone, measured first in the same
process). Printed: the unloaded time and the p50/p99/max of the first runs' times over it.

    .venv/bin/python scripts/bench_concurrency.py --sizes 100,1000,5000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import resource
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import psycopg

from bench_support import ROOT, code_version, pct, scratch_database, seam
from treadle.config import Settings, parse_config
from treadle.engine.step import Engine
from treadle.engine.workers import WorkerPool
from treadle.runtime import Runtime
from treadle.store.runs import NewRun

ITERATIONS = 5


def agent(latency_ms: int, jitter_ms: int) -> dict[str, Any]:
    incr = {"op": "incr", "scope": "user", "key": "calls"}
    return {"model": "script", "tools": ["Memory"], "max_iterations": ITERATIONS,
            "mock": {"script": [{"tool": "Memory", "input": incr}] * (ITERATIONS - 1) + [{"text": "done"}],
                     "latency_ms": latency_ms, "jitter_ms": jitter_ms}}


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Meter:
    """Wraps the engine's seams: the step (`Engine._run_one`) and its model call
    (`Engine._call_model`), counting what is in flight and timing both."""

    def __init__(self) -> None:
        self.in_model = self.peak_model = 0
        self.in_step = self.peak_step = 0
        self.step_minus_model: list[float] = []
        self._model_time: dict[str, float] = {}

    def install(self) -> None:
        run_one = seam(Engine, "_run_one", "one step, lease to commit")
        call_model = seam(Engine, "_call_model", "the step's model call")
        meter = self

        def run_id(lease: Any) -> str:  # engines before the Lease (d8c6ca8) passed the LeasedRun
            return str(getattr(lease, "run", lease).run_id)

        async def timed_model(engine: Any, lease: Any, *a: Any, **kw: Any) -> Any:
            meter.in_model += 1
            meter.peak_model = max(meter.peak_model, meter.in_model)
            t0 = time.perf_counter()
            try:
                return await call_model(engine, lease, *a, **kw)
            finally:
                meter.in_model -= 1
                rid = run_id(lease)
                meter._model_time[rid] = meter._model_time.get(rid, 0.0) + time.perf_counter() - t0

        async def timed_step(engine: Any, lease: Any, *a: Any) -> Any:
            meter.in_step += 1
            meter.peak_step = max(meter.peak_step, meter.in_step)
            meter._model_time.pop(run_id(lease), None)
            t0 = time.perf_counter()
            try:
                return await run_one(engine, lease, *a)
            finally:
                meter.in_step -= 1
                model = meter._model_time.pop(run_id(lease), None)
                if model is not None:
                    meter.step_minus_model.append(time.perf_counter() - t0 - model)

        Engine._call_model = timed_model  # type: ignore[method-assign]
        Engine._run_one = timed_step  # type: ignore[method-assign]


async def open_runtime(url: str, args: argparse.Namespace) -> Runtime:
    extra: dict[str, Any] = {}
    if args.workers:
        extra["workers"] = args.workers
    settings = Settings(database_url=url, home=ROOT / ".treadle" / "bench", **extra)
    config = parse_config({"agents": {"bench": agent(args.latency_ms, args.jitter_ms)}})
    return await Runtime.open(settings, config)


async def start(rt: Runtime, n: int, tenant: str) -> None:
    segments = [{"role": "user", "content": [{"type": "trusted-text", "text": "go"}]}]
    sem = asyncio.Semaphore(8)

    async def one(i: int) -> None:
        async with sem:
            await rt.start_run(NewRun(tenant_id=tenant, agent="bench", segments=segments, user_id=f"u{i}"))

    await asyncio.gather(*(one(i) for i in range(n)))


async def backends(rt: Runtime) -> int:
    async with rt.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")
        row = await cur.fetchone()
    return int(row["n"]) + 1 if row else 0  # + the sampling connection itself


async def progress(rt: Runtime, tenant: str) -> tuple[int, int, int]:
    async with rt.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT count(*) FILTER (WHERE status IN ('completed','failed','cancelled')) AS ended,"
            " count(*) FILTER (WHERE status = 'completed') AS ok, coalesce(sum(iterations), 0) AS iters"
            " FROM runs WHERE tenant_id = %s", (tenant,))
        row = await cur.fetchone()
    assert row is not None
    return int(row["ended"]), int(row["ok"]), int(row["iters"])


async def run_pass(url: str, args: argparse.Namespace, n: int, tenant: str) -> dict[str, Any]:
    rt = await open_runtime(url, args)
    meter = Meter()
    meter.install()
    try:
        await start(rt, n, tenant)
        pool = WorkerPool(rt.engine, rt.dispatcher, rt.settings.workers)  # type: ignore[arg-type]
        rss0, peak_rss, peak_conns = rss_mb(), 0.0, 0
        t0 = time.perf_counter()
        pool.start()
        ended = ok = iters = 0
        while time.perf_counter() - t0 < args.window:
            await asyncio.sleep(0.25)
            peak_conns = max(peak_conns, await backends(rt))
            peak_rss = max(peak_rss, rss_mb())
            ended, ok, iters = await progress(rt, tenant)
            if ended >= n:
                break
        elapsed = time.perf_counter() - t0
        await pool.stop()
        ended, ok, iters = await progress(rt, tenant)
        return {
            "n": n, "elapsed": elapsed, "runs_s": ok / elapsed, "iters_s": iters / elapsed, "ok": ok,
            "peak_model": meter.peak_model, "peak_conns": peak_conns,
            "p50": pct(meter.step_minus_model, 50), "p99": pct(meter.step_minus_model, 99),
            "rss_per_run": (peak_rss - rss0) / max(1, meter.peak_step), "peak_step": meter.peak_step,
            "workers": rt.settings.workers,
        }
    finally:
        await rt.close()


async def order_pass(url: str, args: argparse.Namespace) -> dict[str, float]:
    """The unloaded time of one run, then a backlog: how long the first runs started take."""
    rt = await open_runtime(url, args)
    try:
        pool = WorkerPool(rt.engine, rt.dispatcher, rt.settings.workers)  # type: ignore[arg-type]
        await start(rt, 1, "solo")
        pool.start()
        while (await progress(rt, "solo"))[0] < 1:
            await asyncio.sleep(0.05)
        await pool.stop()
        async with rt.pool.connection() as conn:
            cur = await conn.execute("SELECT extract(epoch FROM completed_at - created_at) AS s FROM runs"
                                     " WHERE tenant_id = 'solo'")
            row = await cur.fetchone()
        unloaded = float(row["s"]) if row else float("nan")
        await start(rt, args.backlog, "backlog")
        t0 = time.perf_counter()
        pool = WorkerPool(rt.engine, rt.dispatcher, rt.settings.workers)  # type: ignore[arg-type]
        pool.start()
        deadline = t0 + args.window
        times: list[float] = []
        while time.perf_counter() < deadline:
            await asyncio.sleep(0.25)
            async with rt.pool.connection() as conn:
                cur = await conn.execute(
                    "SELECT extract(epoch FROM completed_at - first.t0) AS s FROM"
                    " (SELECT min(created_at) AS t0 FROM runs WHERE tenant_id = 'backlog') first,"
                    " (SELECT completed_at FROM runs WHERE tenant_id = 'backlog' ORDER BY created_at, id"
                    "  LIMIT %s) r", (args.first,))
                rows = await cur.fetchall()
            if all(r["s"] is not None for r in rows):
                times = [float(r["s"]) for r in rows]
                break
        await pool.stop()
        if not times:
            return {"unloaded": unloaded, "p50": float("inf"), "p99": float("inf"), "max": float("inf")}
        return {"unloaded": unloaded, "p50": pct(times, 50) / unloaded, "p99": pct(times, 99) / unloaded,
                "max": max(times) / unloaded}
    finally:
        await rt.close()


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100,1000,5000")
    ap.add_argument("--latency-ms", type=int, default=1000)
    ap.add_argument("--jitter-ms", type=int, default=200)
    ap.add_argument("--window", type=float, default=60.0, help="seconds at most per pass")
    ap.add_argument("--workers", type=int, default=0, help="TREADLE_WORKERS (0: the default)")
    ap.add_argument("--backlog", type=int, default=1000)
    ap.add_argument("--first", type=int, default=100)
    ap.add_argument("--label", default="", help="what this run measures (printed)")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    results = []
    for i, n in enumerate(sizes):  # a database each: a pass that could not finish leaves its backlog
        with scratch_database("treadle_conc") as url:
            results.append(await run_pass(url, args, n, f"t{i}"))
    order = None
    if args.backlog:
        with scratch_database("treadle_conc") as url:
            order = await order_pass(url, args)
    with scratch_database("treadle_conc") as url, psycopg.connect(url) as conn:
        maxc = conn.execute("SHOW max_connections").fetchone()[0]  # type: ignore[index]
    print(f"# treadle concurrency benchmark — {time.strftime('%Y-%m-%d %H:%M')} {args.label}")
    print(f"code: {code_version()}")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()};"
          f" load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}; Postgres max_connections {maxc}")
    print(f"workload: {ITERATIONS} iterations per run (4 Memory.incr + text), mock model {args.latency_ms} ms"
          f" + jitter 0-{args.jitter_ms} ms; window {args.window:.0f} s per pass; workers {results[0]['workers']}")
    print()
    print("| runs | runs/s | iterations/s | completed | peak in-flight model calls | peak DB connections"
          " | step - model p50 ms | p99 ms | RSS per in-flight run MB |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r['n']} | {r['runs_s']:.1f} | {r['iters_s']:.1f} | {r['ok']} | {r['peak_model']} | {r['peak_conns']}"
              f" | {r['p50'] * 1000:.1f} | {r['p99'] * 1000:.1f} | {r['rss_per_run']:.3f} |")
    if order is not None:
        print()
        print(f"order: backlog {args.backlog}; the first {args.first} started, time to finish over the unloaded"
              f" time ({order['unloaded']:.2f} s): p50 x{order['p50']:.2f}, p99 x{order['p99']:.2f},"
              f" max x{order['max']:.2f}")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        raise SystemExit(asyncio.run(main()))
