#!/usr/bin/env python
"""Loop benchmark: treadle's per-iteration cost against the raw Postgres floor, same database,
same run.

Workload: R runs x I iterations on the sidecar's Postgres queue with in-process workers; the mock
provider answers at once (0 ms) with one `Memory.incr` tool call per iteration. Each run counts in
its own memory row (scope `user`, one user per run), as each floor connection updates its own row;
a second 4-worker pass uses the old workload, every run incrementing one shared key (scope
`agent`), to show the cost of a hot row.

The floor is what one iteration cannot go below: one transaction of 2 inserts (1 KB each) + an
update + NOTIFY (BEGIN, 4 statements, COMMIT: 6 round trips, one synchronous commit), measured
with 1 connection (latency, against treadle with 1 worker) and with 4 connections (throughput,
against treadle with 4 workers). It is measured before and after treadle's passes; the table uses
the mean of the two and prints both, so drift shows.

Timed per iteration:
- step: one call of the engine's step (`Engine._run_one`; `_execute_one` in engines before
  a182190) — from holding the lease to the step's commit; a chained step starts under the lease
  the previous commit handed over, an unchained one after `claim_job`;
- cycle (1 worker only): from the end of one step to the end of the next — everything, the
  claim of the next job included; this is the per-iteration time the ratio to the floor uses;
- inside a step (1 worker): the model call (`Engine._call_model`), the tools
  (`ToolRunner.run_transactional`/`run_external`, or `Engine._run_tools` before a182190), the
  step transaction (`StepStore.transaction`, BEGIN .. COMMIT), the commit statement
  (`StepStore.commit`), the mid-step append (`StepStore.append`) and the claim (`claim_job`).
A seam that is gone ends the script with a message: the numbers would silently mean something else.

Counted per iteration (scripts/bench_support.py `SqlCounter`, the whole process while the workers
run, minus the benchmark's own polling): queries (every cursor execute = one SQL statement),
transaction-control commands psycopg sends for `conn.transaction()` (BEGIN, SAVEPOINT, RELEASE,
COMMIT, ROLLBACK), round trips (the two together — except in libpq's pipeline mode, the step
transaction's since loopspeed: there statements and commands are queued, `pipelined`, and each
pipeline Sync, `sync`, is one round trip); transactions = autocommit statements (a
statement on an autocommit connection with no transaction open is a transaction of its own) +
BEGIN blocks; commits = autocommit statements + COMMITs. The server's own count
(`pg_stat_database.xact_commit`, read after the pass's connections closed) is printed beside it;
it also counts autovacuum's transactions (visible with chaining off: the jobs table churns).
With 1 worker each statement's await is timed too: where the wall time of an iteration goes (in
pipeline mode, each Sync's await, named by what it carried).
Measured around each pass and each floor: the CPU of this process and of the Postgres server
(postmaster, its live and its exited children, from /proc) and the WAL written (LSN difference);
and the `runs` row updates per iteration, with how many were HOT (pg_stat_user_tables: a non-HOT
update writes a new entry in every index of the table).

Tracing cost (issue 17), 1 worker, the same workload: `off` (no SDK: the OpenTelemetry API's
no-op spans), `no-op exporter` (the SDK records every span, a batch processor hands them to an
exporter that drops them), `batch export` (the SDK's BatchSpanProcessor exporting OTLP/HTTP
protobuf to a collector stand-in on loopback, in this process). The modes alternate, in a
rotated order, for `--tracing-rounds` rounds (3); the table gives the median over the rounds of each pass's figure.
`--tracing-only` prints just this table.

The targets' verdicts come from `--pair-rounds` rounds (3) measured last: the floor, the bare
pass, the floor again, one right after the other, and the bare pass against the mean of the two
floors around it; the verdict is the median round. This machine's speed drifts within minutes
(the 4-connection floor has moved from 700 to 1,240/s within one run), so passes minutes apart
measure the drift as much as the code. The main table's ratios (floors at the start and the end of
the run) are printed too.

    .venv/bin/python scripts/bench_loop.py --runs 200 --iterations 10 --workers 4
    # the previous engine with the same script (its own venv imports its own treadle):
    cd /tmp/base && .venv/bin/python /work/main/scripts/bench_loop.py --runs 200 --iterations 10
Uses $DATABASE_URL if set, else the embedded Postgres under .treadle/bench next to this script.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import os
import platform
import sys
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parent.parent

from bench_support import (  # noqa: E402
    ServerMeter,
    SqlCounter,
    code_version,
    drive_to_completion,
    first_seam,
    ms,
    pct,
    round_trips,
    runs_updates,
    scratch_database,
    seam,
    server_xact_commits,
)
from treadle.config import Settings, parse_config  # noqa: E402
from treadle.engine.workers import WorkerPool  # noqa: E402
from treadle.runtime import Runtime  # noqa: E402
from treadle.store.runs import NewRun  # noqa: E402
from treadle.telemetry import tracing  # noqa: E402

FLOOR_SQL = "BEGIN; 2 x INSERT (1 KB); UPDATE; NOTIFY; COMMIT"


def agents(iterations: int) -> dict[str, Any]:
    per_run = {"op": "incr", "scope": "user", "key": "calls"}
    return {
        # one Memory row per run (scope user, one user per run)
        "bench": {
            "model": "script",
            "tools": ["Memory"],
            "max_iterations": iterations,
            "mock": {"script": [{"tool": "Memory", "input": per_run}] * iterations + [{"text": "done"}]},
        },
        # every run increments the same row (the agent's memory): a hot row
        "shared": {
            "model": "tool-caller",
            "tools": ["Memory"],
            "max_iterations": iterations,
            "mock": {"tool_calls": iterations},
        },
    }


class Instrumented:
    """Wraps the engine's seams on one runtime and collects their timings."""

    def __init__(self, rt: Any, *, steps_only: bool = False) -> None:
        self.times: dict[str, list[float]] = defaultdict(list)
        self.step_ends: list[float] = []
        self.first_start = float("inf")
        self.last_end = 0.0
        self.ended = asyncio.Event()
        self._ends_left: int | None = None
        engine, steps = rt.engine, rt.engine.steps
        step_name = first_seam(engine, ["_run_one", "_execute_one"], "one step under a lease")
        self._wrap(engine, step_name, "step", self._on_step)
        if steps_only:  # two clock reads per step: the cycle and the rate, nothing inside
            return
        seam(engine, "_call_model", "the model call")
        self._wrap(engine, "_call_model", "model")
        runner = getattr(engine, "runner", None)
        if runner is not None:  # a182190 on: tools by their effects
            seam(runner, "run_transactional", "transactional tools, inside the step transaction")
            seam(runner, "run_external", "external tools, before the step transaction")
            self._wrap(runner, "run_transactional", "tools")
            self._wrap(runner, "run_external", "tools (external)")
            seam(steps, "transaction", "the step's commit transaction")
            self._wrap_cm(steps, "transaction", "transaction")
        else:
            seam(engine, "_run_tools", "the tool calls (engines before a182190)")
            self._wrap(engine, "_run_tools", "tools")
        for name in ("commit", "append", "claim_job"):
            seam(steps, name, "StepStore." + name)
            self._wrap(steps, name, {"commit": "commit stmt", "append": "append", "claim_job": "claim"}[name])

    def expect_ends(self, runs: int) -> asyncio.Event:
        """An event set when `runs` steps have ended their run (StepResult.FINISHED)."""
        self._ends_left = runs
        return self.ended

    def _on_step(self, t0: float, t1: float, result: Any) -> None:
        self.first_start = min(self.first_start, t0)
        self.last_end = max(self.last_end, t1)
        self.step_ends.append(t1)
        if self._ends_left is not None and getattr(result, "value", None) == "finished":
            self._ends_left -= 1
            if self._ends_left <= 0:
                self.ended.set()

    def _wrap(self, obj: Any, name: str, label: str, hook: Any = None) -> None:
        inner = getattr(obj, name)
        times = self.times[label]

        async def timed(*a: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            result = None
            try:
                result = await inner(*a, **kw)
                return result
            finally:
                t1 = time.perf_counter()
                times.append(t1 - t0)
                if hook is not None:
                    hook(t0, t1, result)

        setattr(obj, name, timed)

    def _wrap_cm(self, obj: Any, name: str, label: str) -> None:
        inner = getattr(obj, name)
        times = self.times[label]

        @asynccontextmanager
        async def timed(*a: Any, **kw: Any) -> AsyncIterator[Any]:
            t0 = time.perf_counter()
            try:
                async with inner(*a, **kw) as value:
                    yield value
            finally:
                times.append(time.perf_counter() - t0)

        setattr(obj, name, timed)

    def cycles(self) -> list[float]:
        ends = sorted(self.step_ends)
        return [b - a for a, b in itertools.pairwise(ends)]


async def open_with_runs(url: str, runs: int, iterations: int, workers: int, tenant: str, chain_steps: int,
                         agent: str = "bench") -> tuple[Any, Settings, Any]:
    """A runtime on `url` with `runs` runs of `agent` started (one user each): (runtime, settings, config)."""
    settings = Settings(
        database_url=url, home=ROOT / ".treadle" / "bench", workers=workers, chain_steps=chain_steps
    )
    config = parse_config({"agents": agents(iterations)})
    rt = await Runtime.open(settings, config)
    await start_runs(rt, runs, tenant, agent)
    return rt, settings, config


async def start_runs(rt: Any, runs: int, tenant: str, agent: str = "bench") -> None:
    segments = [{"role": "user", "content": [{"type": "trusted-text", "text": "go"}]}]
    for i in range(runs):
        await rt.start_run(NewRun(tenant_id=tenant, agent=agent, segments=segments, user_id=f"u{i}"))


@dataclass
class Warmup:
    """What the bare passes and the floors do before their clock starts (`--cold`: nothing).
    A pass of 200 runs lasts about a second: the first statements of each fresh connection
    (catalog caches, 5 unprepared runs and 5 custom plans per statement before Postgres settles
    on a generic plan) and a fresh runtime's first calls weigh on it, where a server that has
    been up for a minute no longer pays them. `runs`: runs of the same workload through the same
    runtime; `floor`: floor iterations on each of the floor's connections, opened beforehand."""

    runs: int = 50
    floor: int = 100


WARM = Warmup()


@contextmanager
def frozen_heap() -> Iterator[None]:
    """The process's heap so far out of the cyclic collector's sight while a pass or a floor
    runs, as `treadle serve` freezes what its start-up made (sidecar/treadle_sidecar/app.py):
    a full collection walks only what the pass makes. Both sides alike (they share the process:
    without it each full collection walks every module treadle imported, in either pass).
    `--cold`: not frozen."""
    if not WARM.runs and not WARM.floor:
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


async def bench_treadle(
    url: str, runs: int, iterations: int, workers: int, tenant: str, chain_steps: int, agent: str = "bench"
) -> dict[str, Any]:
    # the server counts a backend's commits when it exits: start the runs, and calibrate what
    # opening and closing a runtime costs, with runtimes closed before the measured one opens
    rt, settings, config = await open_with_runs(url, runs, iterations, workers, tenant, chain_steps, agent)
    await rt.close()
    await asyncio.sleep(0.3)
    idle_before = server_xact_commits(url)
    await (await Runtime.open(settings, config)).close()
    await asyncio.sleep(0.3)
    before = server_xact_commits(url)
    open_close = before - idle_before - 1  # the read itself commits once
    upd0, hot0 = runs_updates(url)

    rt = await Runtime.open(settings, config)
    probe = Instrumented(rt)
    ended = probe.expect_ends(runs)
    pool = WorkerPool(rt.engine, rt.dispatcher, workers)  # type: ignore[arg-type]
    meter = ServerMeter(url).start()
    cpu0 = time.process_time()
    with SqlCounter(timed=workers == 1) as counter:
        done = await drive_to_completion(rt, pool, tenant, ended=ended)
    cpu = time.process_time() - cpu0
    meter.stop()
    counts = Counter(counter.counts)
    await rt.close()
    await asyncio.sleep(0.3)  # closed backends report their counts
    server_commits = server_xact_commits(url) - before - 2 - open_close - done["polls"]
    upd1, hot1 = runs_updates(url)
    iters = max(1, done["iterations"])
    window = probe.last_end - probe.first_start
    return {
        "completed": done["completed"],
        "iterations": done["iterations"],
        "rate": done["iterations"] / window if window > 0 else 0.0,
        "step": probe.times["step"],
        "cycle": probe.cycles(),
        "times": probe.times,
        "per_iter": {k: v / iters for k, v in counts.items()},
        "round_trips": round_trips(counts) / iters,
        "transactions": (counts["autocommit"] + counts["BEGIN"]) / iters,
        "commits": (counts["autocommit"] + counts["COMMIT"]) / iters,
        "server_commits": server_commits / iters,
        "runs_updates": (upd1 - upd0) / iters,
        "runs_hot": (hot1 - hot0) / iters,
        "cpu": cpu / iters,
        "server_cpu": meter.cpu / iters if meter.cpu is not None else float("nan"),
        "wal": meter.wal / iters,
        "mean_iteration": window / iters,
        "waits": {k: (v[0] / iters, v[1] / iters) for k, v in counter.waits.items()},
    }


async def bench_rate(url: str, runs: int, iterations: int, workers: int, tenant: str,
                     chain_steps: int) -> dict[str, Any]:
    """The same workload with as little of the benchmark inside the process as the floor's loop has:
    no statement counting, no seam wrappers but the step's (two clock reads per step, as the floor
    reads the clock around each transaction) — the counting and the inner seams cost CPU per
    statement that the floor's bare loop does not pay. The ratios to the floor use these passes."""
    if WARM.runs:  # steady state: the runtime, its connections and their statements warmed up first
        rt, _, _ = await open_with_runs(url, WARM.runs, iterations, workers, f"{tenant}-warm", chain_steps)
        await drive_to_completion(rt, WorkerPool(rt.engine, rt.dispatcher, workers), f"{tenant}-warm")  # type: ignore[arg-type]
        await start_runs(rt, runs, tenant)
    else:
        rt, _, _ = await open_with_runs(url, runs, iterations, workers, tenant, chain_steps)
    probe = Instrumented(rt, steps_only=True)
    ended = probe.expect_ends(runs)
    pool = WorkerPool(rt.engine, rt.dispatcher, workers)  # type: ignore[arg-type]
    with frozen_heap():
        meter = ServerMeter(url).start()
        cpu0 = time.process_time()
        done = await drive_to_completion(rt, pool, tenant, ended=ended)
        cpu = time.process_time() - cpu0
        meter.stop()
    await rt.close()
    iters = max(1, done["iterations"])
    window = probe.last_end - probe.first_start
    return {"completed": done["completed"], "iterations": done["iterations"],
            "rate": done["iterations"] / window if window > 0 else 0.0,
            "step": probe.times["step"], "cycle": probe.cycles(), "cpu": cpu / iters,
            "server_cpu": meter.cpu / iters if meter.cpu is not None else float("nan")}


async def bench_floor(url: str, n: int, concurrency: int, batch: int = 1) -> dict[str, float]:
    """`n` floor iterations over `concurrency` connections: latency p50/p99 (per transaction) and
    the rate (per iteration). `batch` > 1: that many iterations per transaction, sent in a pipeline
    — not the floor of the targets, but what group commit would amortise (docs/benchmarks.md)."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as setup:
        await setup.execute(
            "CREATE TABLE IF NOT EXISTS bench_floor (id bigserial PRIMARY KEY, body text NOT NULL);"
            "CREATE TABLE IF NOT EXISTS bench_floor_state (id int PRIMARY KEY, n bigint NOT NULL);"
            "INSERT INTO bench_floor_state SELECT g, 0 FROM generate_series(1, 64) g ON CONFLICT DO NOTHING"
        )
    body = "x" * 1024
    per = n // concurrency // batch
    lat: list[float] = []

    async def iteration(conn: psycopg.AsyncConnection[Any], worker: int) -> None:
        for _ in range(2):
            await conn.execute("INSERT INTO bench_floor (body) VALUES (%s)", (body,))
        await conn.execute("UPDATE bench_floor_state SET n = n + 1 WHERE id = %s", (worker % 64 + 1,))
        await conn.execute("NOTIFY bench_floor")

    async def one(conn: psycopg.AsyncConnection[Any], worker: int, count: int, timed: bool) -> None:
        for _ in range(count):
            t0 = time.perf_counter()
            if batch == 1:
                async with conn.transaction():
                    await iteration(conn, worker)
            else:
                async with conn.pipeline(), conn.transaction():
                    for _ in range(batch):
                        await iteration(conn, worker)
            if timed:
                lat.append(time.perf_counter() - t0)

    async def connected(worker: int) -> None:  # cold: the connection is opened on the clock
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            await one(conn, worker, per, True)

    conns = []
    if WARM.floor:  # steady state: connected and warmed up before the clock starts
        conns = [await psycopg.AsyncConnection.connect(url, autocommit=True) for _ in range(concurrency)]
        await asyncio.gather(*(one(c, w, WARM.floor, False) for w, c in enumerate(conns)))
    with frozen_heap():
        meter = ServerMeter(url).start()
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        if conns:
            await asyncio.gather(*(one(c, w, per, True) for w, c in enumerate(conns)))
        else:
            await asyncio.gather(*(connected(w) for w in range(concurrency)))
        done = per * batch * concurrency
        rate = done / (time.perf_counter() - t0)
        cpu = time.process_time() - cpu0
        meter.stop()
    for c in conns:
        await c.close()
    return {"p50": pct(lat, 50), "p99": pct(lat, 99), "rate": rate, "cpu": cpu / done,
            "server_cpu": meter.cpu / done if meter.cpu is not None else float("nan"), "wal": meter.wal / done}


def mean_floor(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    return {k: (a[k] + b[k]) / 2 for k in a}


async def bench_pair(url: str, args: argparse.Namespace, solo_runs: int, round_no: int) -> dict[str, float]:
    """One round of the target ratios with each bare pass between two floors measured just before
    and just after it: this machine's speed drifts within minutes (the floor moved 2x between the
    start and the end of one run), and a ratio of passes minutes apart measures the drift too."""
    w = args.workers
    f1a = await bench_floor(url, args.floor_ops // 2, 1)
    one = await bench_rate(url, solo_runs, args.iterations, 1, f"pair1-{round_no}", args.chain_steps)
    f1b = await bench_floor(url, args.floor_ops // 2, 1)
    fna = await bench_floor(url, args.floor_ops, w)
    many = await bench_rate(url, args.runs, args.iterations, w, f"pairn-{round_no}", args.chain_steps)
    fnb = await bench_floor(url, args.floor_ops, w)
    return {
        "cycle": pct(one["cycle"], 50) / ((f1a["p50"] + f1b["p50"]) / 2),
        "rate": many["rate"] / ((fna["rate"] + fnb["rate"]) / 2),
        "floor1": (f1a["p50"] + f1b["p50"]) / 2, "floorn": (fna["rate"] + fnb["rate"]) / 2,
        # the CPU (client + server) the floor needs per iteration ÷ treadle's: on 2 cores it bounds
        # the rate (it drifts with the machine too: 0.60 to 0.88 within one run, docs/benchmarks.md)
        "cpu": ((fna["cpu"] + fna["server_cpu"] + fnb["cpu"] + fnb["server_cpu"]) / 2)
        / (many["cpu"] + many["server_cpu"]),
        "completed": float(one["completed"] == solo_runs and many["completed"] == args.runs),
    }


class _Collector:
    """An OTLP/HTTP endpoint stand-in on loopback: answers 200 to every POST, counts what came."""

    def __init__(self) -> None:
        import http.server
        import threading

        seen = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                seen.requests += 1
                seen.bytes += len(self.rfile.read(int(self.headers.get("content-length", "0"))))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *a: Any) -> None:
                pass

        self.requests = 0
        self.bytes = 0
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def tracer_provider(mode: str, collector: _Collector) -> Any:
    """None (off), or an SDK provider counting its spans and exporting them by `mode`."""
    if mode == "off":
        return None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Dropping(SpanExporter):
        def __init__(self) -> None:
            self.spans = 0

        def export(self, spans: Any) -> SpanExportResult:
            self.spans += len(spans)
            return SpanExportResult.SUCCESS

    exporter: Any = Dropping() if mode == "no-op exporter" else OTLPSpanExporter(endpoint=collector.url)
    provider = TracerProvider()
    # a queue deep enough that the span micro-benchmark drops nothing (the default, 2048, would)
    provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=32768))
    return provider


async def bench_tracing(url: str, runs: int, iterations: int, chain_steps: int,
                        rounds: int = 3) -> dict[str, dict[str, float]]:
    modes = ["off", "no-op exporter", "batch export"]
    results: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    collector = _Collector()
    try:
        for rnd in range(rounds):
            for mode in modes[rnd % 3:] + modes[:rnd % 3]:  # rotated: no mode always runs first
                provider = tracer_provider(mode, collector)
                tracing.use_tracer_provider(provider)
                before = collector.requests
                try:
                    r = await bench_treadle(url, runs, iterations, 1, f"trace-{rnd}-{mode}", chain_steps)
                finally:
                    tracing.use_tracer_provider(None)
                    if provider is not None:
                        await asyncio.to_thread(provider.shutdown)
                r["exports"] = collector.requests - before
                results[mode].append(r)
    finally:
        collector.close()
    out: dict[str, dict[str, float]] = {}
    for mode, rs in results.items():  # the median over the rounds (other load on the machine varies)
        out[mode] = {
            "step": pct([pct(r["step"], 50) for r in rs], 50),
            "step99": pct([pct(r["step"], 99) for r in rs], 50),
            "cycle": pct([pct(r["cycle"], 50) for r in rs], 50),
            "cycle_min": min(pct(r["cycle"], 50) for r in rs),
            "cycle_max": max(pct(r["cycle"], 50) for r in rs),
            "cpu": pct([r["cpu"] for r in rs], 50),
            "rate": pct([r["rate"] for r in rs], 50),
            "completed": sum(r["completed"] for r in rs),
            "exports": sum(r["exports"] for r in rs),
        }
    out["_collector"] = {"bytes": float(collector.bytes), "requests": float(collector.requests)}
    return out


def span_overhead_us(mode: str, n: int = 5000) -> float:
    """CPU µs per iteration for the spans alone (a step, a model call inside it, a tool call),
    no database: the clean part of the cost, without the loop's noise."""
    collector = _Collector()
    provider = tracer_provider(mode, collector)
    tracing.use_tracer_provider(provider)
    try:
        t0 = time.process_time()
        for i in range(n):
            with tracing.step(run_id="r_bench", step_no=i, tenant_id="t", agent="bench", run_context=None):
                with tracing.model_call(provider="mock", model="script", iteration=i, attempt=0,
                                        fallback=False) as sp:
                    tracing.set_model_usage(sp, response_model="script", input_tokens=10, output_tokens=5,
                                            stop_reason="tool_use")
                with tracing.tool_call(tool="Memory", call_id="toolu_1", effects="transactional", iteration=i) as sp:
                    tracing.set_outcome(sp, "ok")
        if provider is not None:
            provider.shutdown()  # the export's CPU counts too
        return (time.process_time() - t0) / n * 1e6
    finally:
        tracing.use_tracer_provider(None)
        collector.close()


def print_tracing(t: dict[str, dict[str, float]], runs: int, iterations: int, rounds: int) -> None:
    off = t["off"]
    print(f"Tracing cost per iteration, 1 worker, {runs} runs x {iterations} iterations per pass, median of"
          f" {rounds} rounds (spans per iteration: 1 step + 1 model call + 1 tool call):")
    print()
    print("| tracing | step p50 ms | step p99 ms | cycle p50 ms (rounds' range) | iterations/s | CPU ms/iteration |"
          " Δ cycle vs off | Δ CPU vs off |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for mode in ("off", "no-op exporter", "batch export"):
        r = t[mode]
        print(f"| {mode} | {ms(r['step'])} | {ms(r['step99'])} | {ms(r['cycle'])} ({ms(r['cycle_min'])} to "
              f"{ms(r['cycle_max'])}) | {r['rate']:.0f} | {ms(r['cpu'])} | {ms(r['cycle'] - off['cycle'])} |"
              f" {ms(r['cpu'] - off['cpu'])} |")
    print()
    print("A Δ smaller than the rounds' range is noise (other load on the machine), not a cost: the spans-alone"
          " line below isolates the cost.")
    print()
    alone = ", ".join(f"{m} {span_overhead_us(m):.0f}" for m in ("off", "no-op exporter", "batch export"))
    print("The spans alone (5000 iterations of step + model call + tool call spans, no database), CPU µs per"
          f" iteration: {alone}")
    c = t["_collector"]
    print()
    print(f"batch export: {c['requests']:.0f} OTLP requests, {c['bytes'] / 1024:.0f} KiB received by the loopback"
          " collector")


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--solo-runs", type=int, default=50, help="runs of the 1-worker pass")
    ap.add_argument("--floor-ops", type=int, default=2000, help="floor transactions per measurement")
    ap.add_argument("--chain-steps", type=int, default=8, help="TREADLE_CHAIN_STEPS for the main passes")
    ap.add_argument("--tracing-runs", type=int, default=50, help="runs per pass of the tracing-cost table")
    ap.add_argument("--tracing-rounds", type=int, default=3, help="rounds of the tracing-cost passes")
    ap.add_argument("--floor-batch", type=int, default=4,
                    help="iterations per transaction of the batched floor (what group commit amortises); 1: skip it")
    ap.add_argument("--tracing-only", action="store_true", help="print only the tracing-cost table")
    ap.add_argument("--cold", action="store_true",
                    help="no warm-up before the bare passes and the floors and no frozen heap during them"
                         " (the method before session 11)")
    ap.add_argument("--pair-rounds", type=int, default=3,
                    help="rounds of floor / bare pass / floor, adjacent in time, for the target ratios")
    args = ap.parse_args()
    if args.cold:
        WARM.runs = WARM.floor = 0
    w = args.workers
    solo_runs = min(args.runs, args.solo_runs)
    if args.tracing_only:
        with scratch_database("treadle_bench") as url:
            t = await bench_tracing(url, args.tracing_runs, args.iterations, args.chain_steps, args.tracing_rounds)
        print(f"# treadle tracing cost — {time.strftime('%Y-%m-%d %H:%M')}, code: {code_version()}")
        print()
        print_tracing(t, args.tracing_runs, args.iterations, args.tracing_rounds)
        modes = ("off", "no-op exporter", "batch export")
        return 0 if all(t[m]["completed"] == args.tracing_rounds * args.tracing_runs for m in modes) else 1

    with scratch_database("treadle_bench") as url:
        with psycopg.connect(url) as conn:
            version = conn.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
        floor1_a = await bench_floor(url, args.floor_ops, 1)
        floorn_a = await bench_floor(url, args.floor_ops * 2, w)
        solo = await bench_treadle(url, solo_runs, args.iterations, 1, "solo", args.chain_steps)
        ours = await bench_treadle(url, args.runs, args.iterations, w, "pool", args.chain_steps)
        bare1 = await bench_rate(url, solo_runs, args.iterations, 1, "bare-solo", args.chain_steps)
        bare = await bench_rate(url, args.runs, args.iterations, w, "bare", args.chain_steps)
        unchained = await bench_treadle(url, args.runs, args.iterations, w, "one-per-job", 1)
        shared = await bench_treadle(url, args.runs, args.iterations, w, "shared", args.chain_steps, "shared")
        floor1_b = await bench_floor(url, args.floor_ops, 1)
        floorn_b = await bench_floor(url, args.floor_ops * 2, w)
        batched = await bench_floor(url, args.floor_ops * 2, w, args.floor_batch) if args.floor_batch > 1 else None
        traced = await bench_tracing(url, min(args.runs, args.tracing_runs), args.iterations, args.chain_steps,
                                     args.tracing_rounds)
        pairs = [await bench_pair(url, args, solo_runs, r) for r in range(args.pair_rounds)]
    floor1, floorn = mean_floor(floor1_a, floor1_b), mean_floor(floorn_a, floorn_b)

    where = "DATABASE_URL" if os.environ.get("DATABASE_URL") else "embedded pgserver (unix socket)"
    print(f"# treadle loop benchmark — {time.strftime('%Y-%m-%d %H:%M')}")
    print(f"code: {code_version()}")
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()},"
        f" psycopg {psycopg.__version__}, PostgreSQL {version} ({where}); load average before/after:"
        f" {' '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )
    print(
        f"workload: {args.runs} runs x {args.iterations} iterations ({solo_runs} runs with 1 worker),"
        f" chain_steps {args.chain_steps}, mock provider (0 ms), one Memory.incr per iteration"
    )
    print(
        f"completed runs: 1 worker {solo['completed']}/{solo_runs}, {w} workers {ours['completed']}/{args.runs},"
        f" unchained {unchained['completed']}/{args.runs}, shared key {shared['completed']}/{args.runs}"
    )
    print()
    print("| measure | p50 ms | p99 ms | iterations/s |")
    print("|---|---:|---:|---:|")
    print(f"| treadle iteration, 1 worker: cycle (step end → next step end, claims included) |"
          f" {ms(pct(solo['cycle'], 50))} | {ms(pct(solo['cycle'], 99))} | {solo['rate']:.0f} |")
    print(f"| treadle iteration, 1 worker: step (lease held → commit) | {ms(pct(solo['step'], 50))} |"
          f" {ms(pct(solo['step'], 99))} | |")
    print(f"| treadle iteration, {w} workers: step | {ms(pct(ours['step'], 50))} | {ms(pct(ours['step'], 99))} |"
          f" {ours['rate']:.0f} |")
    print(f"| same, chaining off (one job per iteration, {w} workers) | {ms(pct(unchained['step'], 50))} |"
          f" {ms(pct(unchained['step'], 99))} | {unchained['rate']:.0f} |")
    print(f"| same, every run incrementing one shared Memory key ({w} workers) | {ms(pct(shared['step'], 50))} |"
          f" {ms(pct(shared['step'], 99))} | {shared['rate']:.0f} |")
    print(f"| **bare** (only the step seam timed, no statement counting), 1 worker: cycle |"
          f" {ms(pct(bare1['cycle'], 50))} | {ms(pct(bare1['cycle'], 99))} | {bare1['rate']:.0f} |")
    print(f"| **bare**, 1 worker: step | {ms(pct(bare1['step'], 50))} | {ms(pct(bare1['step'], 99))} | |")
    print(f"| **bare**, {w} workers: step | {ms(pct(bare['step'], 50))} | {ms(pct(bare['step'], 99))} |"
          f" {bare['rate']:.0f} |")
    for label, f_a, f_b, f in (("1 conn", floor1_a, floor1_b, floor1), (f"{w} conns", floorn_a, floorn_b, floorn)):
        print(f"| PG floor: {FLOOR_SQL}, {label} (mean of before {ms(f_a['p50'])} / after {ms(f_b['p50'])} ms,"
              f" {f_a['rate']:.0f} / {f_b['rate']:.0f}/s) | {ms(f['p50'])} | {ms(f['p99'])} | {f['rate']:.0f} |")
    if batched is not None:
        print(f"| not a target: the floor with {args.floor_batch} iterations per pipelined transaction, {w} conns"
              f" (p50/p99 per transaction) | {ms(batched['p50'])} | {ms(batched['p99'])} | {batched['rate']:.0f} |")
    print()
    print("Inside a step, 1 worker (per call; `transaction` is BEGIN .. COMMIT and holds the tools and the commit"
          " statement):")
    print()
    print("| seam | calls | p50 ms | p99 ms |")
    print("|---|---:|---:|---:|")
    for label in ("claim", "model", "append", "tools", "tools (external)", "transaction", "commit stmt"):
        values = solo["times"].get(label) or []
        if values:
            print(f"| {label} | {len(values)} | {ms(pct(values, 50))} | {ms(pct(values, 99))} |")
    print()
    print(f"Where a 1-worker iteration's wall time goes (mean {ms(solo['mean_iteration'])} ms; the treadle process"
          f" used {ms(solo['cpu'])} ms of CPU per iteration — {ms(ours['cpu'])} ms with {w} workers):")
    print()
    print("| statement (awaited in the engine) | per iteration | ms per iteration | ms per call |")
    print("|---|---:|---:|---:|")
    waits = sorted(solo["waits"].items(), key=lambda kv: -kv[1][0])
    for name, (secs, calls) in waits:
        if calls >= 0.01:
            print(f"| `{name.replace('|', '/')}` | {calls:.2f} | {ms(secs)} | {ms(secs / calls)} |")
    awaited = sum(secs for secs, _ in solo["waits"].values())
    print(f"| all statements | | {ms(awaited)} | |")
    print(f"| the rest: Python between statements, the event loop | | {ms(solo['mean_iteration'] - awaited)} | |")
    print()
    print("CPU and WAL per iteration (treadle) or per floor transaction — on 2 cores the rate is bounded by the"
          " CPU both sides need:")
    print()
    print("| pass | client CPU ms | server CPU ms | total CPU ms | WAL bytes |")
    print("|---|---:|---:|---:|---:|")
    passes = [("treadle, 1 worker", solo), (f"treadle, {w} workers", ours), ("treadle, chaining off", unchained),
              ("treadle, shared key", shared), ("floor, 1 conn", floor1), (f"floor, {w} conns", floorn)]
    if batched is not None:
        passes.append((f"floor, {args.floor_batch} iterations per transaction, {w} conns (not a target)", batched))
    for label, r in passes:
        print(f"| {label} | {ms(r['cpu'])} | {ms(r['server_cpu'])} | {ms(r['cpu'] + r['server_cpu'])} |"
              f" {r['wal']:.0f} |")
    print()
    print("Per iteration (client-side counts, see the docstring; server commits: pg_stat_database.xact_commit,"
          " autovacuum included):")
    print()
    kinds = ["query", "BEGIN", "SAVEPOINT", "RELEASE", "COMMIT", "ROLLBACK", "autocommit", "pipelined", "sync"]
    print("| pass | " + " | ".join(kinds) + " | round trips | transactions | commits | server commits |"
          " runs row updates (HOT) |")
    print("|---|" + "---:|" * (len(kinds) + 5))
    for label, r in (("1 worker", solo), (f"{w} workers", ours), ("chaining off", unchained),
                     ("shared key", shared)):
        cells = " | ".join(f"{r['per_iter'].get(k, 0.0):.2f}" for k in kinds)
        print(f"| {label} | {cells} | {r['round_trips']:.2f} | {r['transactions']:.2f} | {r['commits']:.2f} |"
              f" {r['server_commits']:.2f} | {r['runs_updates']:.2f} ({r['runs_hot']:.2f}) |")
    print()
    print_tracing(traced, min(args.runs, args.tracing_runs), args.iterations, args.tracing_rounds)
    print()
    instrumented = (pct(solo["cycle"], 50) / floor1["p50"], ours["rate"] / floorn["rate"])
    cycle_ratio = pct(bare1["cycle"], 50) / floor1["p50"]
    step_ratio = pct(bare1["step"], 50) / floor1["p50"]
    rate_ratio = bare["rate"] / floorn["rate"]
    print(f"the instrumented passes (statements counted, every seam timed) for comparison: cycle"
          f" x{instrumented[0]:.2f}, rate {instrumented[1]:.0%}; the bare passes used"
          f" {ms(bare1['cpu'])} / {ms(bare['cpu'])} ms of client CPU and {ms(bare1['server_cpu'])} /"
          f" {ms(bare['server_cpu'])} ms of server CPU per iteration (1 / {w} workers)")
    print(f"the main bare passes against the floors measured at the start and the end of the run: cycle"
          f" x{cycle_ratio:.2f} (step x{step_ratio:.2f}), rate {rate_ratio:.0%}")
    if pairs:
        print()
        print("The targets: each bare pass between two floors measured just before and just after it"
              f" ({len(pairs)} rounds; the verdict is the median):")
        print()
        print("| round | floor 1 conn p50 ms | 1 worker cycle ÷ floor | floor {w} conns /s | {w} workers rate ÷ floor"
              " | CPU per iteration, floor ÷ {w} workers |".replace("{w}", str(w)))
        print("|---:|---:|---:|---:|---:|---:|")
        for i, p in enumerate(pairs, 1):
            print(f"| {i} | {ms(p['floor1'])} | x{p['cycle']:.2f} | {p['floorn']:.0f} | {p['rate']:.0%}"
                  f" | {p['cpu']:.2f} |")
        cycle_ratio = sorted(p["cycle"] for p in pairs)[len(pairs) // 2]
        rate_ratio = sorted(p["rate"] for p in pairs)[len(pairs) // 2]
        cpu_ratio = sorted(p["cpu"] for p in pairs)[len(pairs) // 2]
        print()
        print(f"not a target: CPU (client + server) per iteration, the floor's ÷ treadle's, {w} workers:"
              f" {cpu_ratio:.2f} (median round)")
    print(f"ratio p50 (bare), 1 worker / floor 1 conn: cycle x{cycle_ratio:.2f}"
          f" (target ≤ 1.5: {'met' if cycle_ratio <= 1.5 else 'NOT met'})")
    print(f"ratio rate (bare), {w} workers / floor {w} conns: {rate_ratio:.0%}"
          f" (target ≥ 75 %: {'met' if rate_ratio >= 0.75 else 'NOT met'})")
    ok = (solo["completed"] == solo_runs and ours["completed"] == args.runs and unchained["completed"] == args.runs
          and shared["completed"] == args.runs and bare1["completed"] == solo_runs and bare["completed"] == args.runs
          and all(p["completed"] for p in pairs))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
