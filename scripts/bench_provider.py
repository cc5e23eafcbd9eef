#!/usr/bin/env python
"""Provider-driver benchmark: what the OpenAI-compatible driver adds per iteration over the mock.

A zero-latency fake Chat Completions server (its own process, loopback HTTP/1.1, precomputed SSE
answers: a Memory tool call per iteration, then text) stands in for the vendor, so the figures
are the driver's own cost: building the request, JSON, httpx, the SSE reader, assembling blocks.

1. the provider call alone, sequentially: mock vs openai driver, p50/p99;
2. the same loop as scripts/bench_loop.py (R runs x I iterations, W workers on the Postgres
   queue, one Memory.incr per iteration) once with the mock and once with the openai driver;
   each step (lease → commit) timed, p50/p99, and the difference.

    .venv/bin/python scripts/bench_provider.py --runs 50 --iterations 10 --workers 4 --calls 2000
Uses $DATABASE_URL if set, else the embedded Postgres under .treadle/bench.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import platform
import secrets
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

from bench_support import drive_to_completion, pct, scratch_database, seam  # noqa: E402
from treadle.config import Settings, parse_config  # noqa: E402
from treadle.domain.content import Message, TextBlock  # noqa: E402
from treadle.engine.workers import WorkerPool  # noqa: E402
from treadle.providers.base import ModelRequest, RunInfo, ToolSpec  # noqa: E402
from treadle.providers.mock import MockProvider  # noqa: E402
from treadle.providers.registry import build_provider  # noqa: E402
from treadle.runtime import Runtime  # noqa: E402
from treadle.store.runs import NewRun  # noqa: E402

# -- the fake vendor (runs in a child process) ----------------------------------------------------


def _sse(doc: Any) -> bytes:
    return b"data: " + json.dumps(doc, separators=(",", ":")).encode() + b"\n\n"


def _answer(n_assistant: int, tool_calls: int) -> bytes:
    """The whole chunked SSE body for a conversation with `n_assistant` assistant turns so far."""
    base = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 0, "model": "bench-model"}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return _sse({**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]})

    events = [chunk({"role": "assistant", "content": ""})]
    if n_assistant < tool_calls:
        args = json.dumps({"op": "incr", "scope": "agent", "key": "calls"})
        events.append(chunk({"tool_calls": [{"index": 0, "id": f"call_{n_assistant}", "type": "function",
                                             "function": {"name": "Memory", "arguments": ""}}]}))  # fmt: skip
        events.append(chunk({"tool_calls": [{"index": 0, "function": {"arguments": args}}]}))
        events.append(chunk({}, "tool_calls"))
    else:
        for piece in ("done ", "after ", f"{n_assistant} tool calls"):
            events.append(chunk({"content": piece}))
        events.append(chunk({}, "stop"))
    events.append(_sse({**base, "choices": [], "usage": {"prompt_tokens": 40, "completion_tokens": 8,
                                                         "total_tokens": 48}}))  # fmt: skip
    events.append(b"data: [DONE]\n\n")
    return b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"


HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def _serve(port_q: Any, tool_calls: int) -> None:
    cache: dict[int, bytes] = {}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                line = await reader.readline()
                if not line:
                    return
                length = 0
                while True:
                    h = await reader.readline()
                    if h in (b"\r\n", b""):
                        break
                    if h[:15].lower() == b"content-length:":
                        length = int(h[15:])
                body = json.loads(await reader.readexactly(length))
                n = sum(1 for m in body["messages"] if m["role"] == "assistant")
                if n not in cache:
                    cache[n] = HEAD + _answer(n, tool_calls)
                writer.write(cache[n])
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port_q.put(server.sockets[0].getsockname()[1])
        await server.serve_forever()

    asyncio.run(main())


# -- measuring -------------------------------------------------------------------------------------


def ms(x: float) -> str:
    return f"{x * 1000:.3f}"


async def bench_calls(base_url: str, calls: int) -> dict[str, list[float]]:
    """The provider call alone: same request, mock vs the openai driver, interleaved in blocks."""
    cfg = parse_config({"providers": {"fake": {"driver": "openai", "base_url": base_url, "api_key_env": "BENCH_KEY"}}})
    os.environ["BENCH_KEY"] = "sk-bench-not-a-secret"
    driver = build_provider("fake", cfg.providers["fake"])
    mock = MockProvider()
    messages = [Message("user", [TextBlock("go " * 50)]), Message("assistant", [TextBlock("ok")]),
                Message("user", [TextBlock("again")])]  # fmt: skip
    tools = [ToolSpec("Memory", "Per-scope key/value memory.", {"type": "object", "properties": {
        "op": {"type": "string"}, "scope": {"type": "string"}, "key": {"type": "string"}}})]  # fmt: skip
    out: dict[str, list[float]] = {"mock": [], "openai": []}
    for _ in range(20):  # warm-up (connection pool, imports)
        await driver.call(ModelRequest("bench-model", "sys", messages, tools, run=RunInfo("r", "a", 1)))
    for block in range(10):
        for name, provider, model in (("mock", mock, "echo"), ("openai", driver, "bench-model")):
            for i in range(calls // 10):
                req = ModelRequest(model, "You are brief.", messages, tools, run=RunInfo("r", "a", block * calls + i))
                t0 = time.perf_counter()
                await provider.call(req, None)
                out[name].append(time.perf_counter() - t0)
    await driver.aclose()  # type: ignore[attr-defined]
    return out


async def bench_loop(url: str, base_url: str, agent: str, runs: int, iterations: int, workers: int) -> dict[str, Any]:
    config = parse_config({
        "providers": {"fake": {"driver": "openai", "base_url": base_url, "api_key_env": "BENCH_KEY",
                               "max_concurrent": max(4, workers * 2)}},
        "agents": {
            "mock": {"model": "tool-caller", "tools": ["Memory"], "max_iterations": iterations,
                     "mock": {"tool_calls": iterations}},
            "openai": {"provider": "fake", "model": "bench-model", "tools": ["Memory"], "max_iterations": iterations},
        },
    })  # fmt: skip
    settings = Settings(database_url=url, home=ROOT / ".treadle" / "bench", workers=workers)
    rt = await Runtime.open(settings, config)
    engine: Any = rt.engine
    step_name = "_run_one"
    original = seam(engine, step_name, "one step under a lease, timed lease → commit")
    step_times: list[float] = []

    async def timed(lease: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return await original(lease)
        finally:
            step_times.append(time.perf_counter() - t0)

    setattr(engine, step_name, timed)
    tenant = f"bench_{agent}_{secrets.token_hex(3)}"
    segments = [{"role": "user", "content": [{"type": "trusted-text", "text": "go"}]}]
    for _ in range(runs):
        await rt.start_run(NewRun(tenant_id=tenant, agent=agent, segments=segments))
    pool = WorkerPool(rt.engine, rt.dispatcher, workers)  # type: ignore[arg-type]
    done = await drive_to_completion(rt, pool, tenant)
    await rt.close()
    return {"completed": done["completed"], "iterations": done["iterations"], "rate": done["rate"],
            "p50": pct(step_times, 50), "p99": pct(step_times, 99), "steps": len(step_times)}  # fmt: skip


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--calls", type=int, default=2000, help="provider calls per provider in part 1")
    args = ap.parse_args()

    ctx = mp.get_context("spawn")
    port_q = ctx.Queue()
    server = ctx.Process(target=_serve, args=(port_q, args.iterations), daemon=True)
    server.start()
    base_url = f"http://127.0.0.1:{port_q.get(timeout=30)}/v1"
    try:
        calls = await bench_calls(base_url, args.calls)
        with scratch_database("treadle_benchprov") as url:
            solo: dict[str, Any] = {}
            loops: dict[str, Any] = {}
            for agent in ("mock", "openai", "mock", "openai"):  # twice each, alternating; keep the second
                solo[agent] = await bench_loop(url, base_url, agent, min(args.runs, 20), args.iterations, 1)
                loops[agent] = await bench_loop(url, base_url, agent, args.runs, args.iterations, args.workers)
    finally:
        server.terminate()
        server.join(5)

    m, o = calls["mock"], calls["openai"]
    sm, so = solo["mock"], solo["openai"]
    lm, lo = loops["mock"], loops["openai"]
    print(f"# treadle provider-driver benchmark — {time.strftime('%Y-%m-%d')}")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"fake vendor: OpenAI Chat Completions SSE on loopback, zero latency, separate process;"
          f" loop: {args.runs} runs x {args.iterations} iterations, {args.workers} workers, Memory.incr per"
          " iteration")  # fmt: skip
    print()
    print("| measure | mock p50 ms | openai p50 ms | driver adds p50 | mock p99 ms | openai p99 ms | driver adds p99 |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    print(f"| provider call alone ({len(o)} calls, sequential) | {ms(pct(m, 50))} | {ms(pct(o, 50))} |"
          f" {ms(pct(o, 50) - pct(m, 50))} | {ms(pct(m, 99))} | {ms(pct(o, 99))} | {ms(pct(o, 99) - pct(m, 99))} |")
    print(f"| loop iteration (lease → commit, 1 worker) | {ms(sm['p50'])} | {ms(so['p50'])} |"
          f" {ms(so['p50'] - sm['p50'])} | {ms(sm['p99'])} | {ms(so['p99'])} | {ms(so['p99'] - sm['p99'])} |")
    print(f"| loop iteration (lease → commit, {args.workers} workers) | {ms(lm['p50'])} | {ms(lo['p50'])} |"
          f" {ms(lo['p50'] - lm['p50'])} | {ms(lm['p99'])} | {ms(lo['p99'])} | {ms(lo['p99'] - lm['p99'])} |")
    print()
    try:
        import sniffio  # noqa: F401

        note = "present"
    except ImportError:
        note = "absent: httpcore retries a failed `import sniffio` on every request (~0.5 ms here)"
    print(f"sniffio: {note}")
    print(f"iterations/s ({args.workers} workers): mock {lm['rate']:.0f}, openai {lo['rate']:.0f};"
          f" completed runs: mock {lm['completed']}/{args.runs}, openai {lo['completed']}/{args.runs}")  # fmt: skip
    ok = lm["completed"] == args.runs and lo["completed"] == args.runs
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
