"""Replay cost of a code agent's step (providers/codejs.py) at 1, 10 and 100 recorded tool calls:
one provider call = a fresh QuickJS context, `run(input)` from the start, every recorded call
answered from the transcript, stopped at the frontier. No database: this is the provider's own
cost, what a step adds over a model call. `python scripts/bench_code_agent.py [--repeat N]`.

A second table: the same step at 100 recorded calls with the code padded (helper functions that
never run) to 8 and 64 KB, and what compiling the code alone costs in a fresh context — the most a
bytecode cache could save, which quickjs-ng's Python binding cannot offer (no bytecode API) — and
what the program cache saves for an `agent_code/<agent>/index.js` (a read and a SHA-256 a step)."""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from treadle.domain.content import Message, TextBlock, ToolResultBlock, ToolUseBlock
from treadle.providers.base import ModelRequest, RunInfo, ToolSpec
from treadle.providers.codejs import CodeAgentSettings, CodeJsProvider

CODE = """
function run(input) {
  var n = parseInt(input.prompt, 10), total = 0;
  for (var i = 0; i <= n; i++) {
    total += JSON.parse(Tally({i: i, note: 'call ' + i})).tally;
  }
  return 'total ' + total;
}
"""


def padded(kb: int) -> str:
    """CODE plus helper functions that never run, to about `kb` KiB."""
    out, i = [CODE], 0
    while sum(len(x) for x in out) < kb * 1024:
        out.append(f"function helper{i}(a) {{ var s = 0; for (var j = 0; j < a; j++) {{ s += j * {i}; }} "
                   f"return 'helper {i}: ' + s; }}")
        i += 1
    return "\n".join(out)


def median_ms(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def messages(recorded: int) -> list[Message]:
    out = [Message("user", [TextBlock(str(recorded + 5))])]
    for i in range(recorded):
        use = ToolUseBlock(f"t{i}", "Tally", {"i": i, "note": f"call {i}"})
        out.append(Message("assistant", [use]))
        out.append(Message("user", [ToolResultBlock(use.id, f'{{"tally": {i + 1}}}')]))
    return out


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=200)
    args = ap.parse_args()
    p = CodeJsProvider(CodeAgentSettings(enabled=True))
    print("| recorded calls | median ms | p95 ms |")
    print("|---:|---:|---:|")
    for n in (1, 10, 100):
        req = ModelRequest(model="loomcycle/code-js", system="", messages=messages(n),
                           tools=[ToolSpec("Tally", "", {"type": "object"})], run=RunInfo("bench", "bench", n),
                           options={"code_agent": {"code_body": CODE}})
        for _ in range(5):
            await p.call(req)
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            resp = await p.call(req)
            times.append((time.perf_counter() - t0) * 1000)
            assert resp.stop_reason == "tool_use"
        times.sort()
        print(f"| {n} | {statistics.median(times):.2f} | {times[int(len(times) * 0.95) - 1]:.2f} |")
    await sizes(p, args.repeat)


async def sizes(p: CodeJsProvider, repeat: int) -> None:
    import quickjs

    print()
    print("| code | step at 100 calls, median ms | compile alone (fresh context + parse), median ms |")
    print("|---|---:|---:|")
    for kb in (0, 8, 64):
        code = padded(kb) if kb else CODE
        req = ModelRequest(model="loomcycle/code-js", system="", messages=messages(100),
                           tools=[ToolSpec("Tally", "", {"type": "object"})], run=RunInfo("bench", "bench", 100),
                           options={"code_agent": {"code_body": code}})
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            await p.call(req)
            times.append((time.perf_counter() - t0) * 1000)

        def compile_only(src: str = code) -> None:
            quickjs.Context().eval(src)

        alone = median_ms(compile_only, repeat)
        print(f"| {len(code) / 1024:.1f} KiB | {statistics.median(times):.2f} | {alone:.2f} |")
    with tempfile.TemporaryDirectory() as root:
        (Path(root) / "bench").mkdir()
        (Path(root) / "bench" / "index.js").write_text(padded(64))
        cached = CodeJsProvider(CodeAgentSettings(enabled=True, root=root))
        cached.source("bench", None)
        hit = median_ms(lambda: cached.source("bench", None), repeat)

        def miss() -> None:
            cached.programs.files.clear()
            cached.source("bench", None)

        print()
        print(f"agent_code/bench/index.js (64 KiB) a step: {hit:.3f} ms from the program cache, "
              f"{median_ms(miss, repeat):.3f} ms read and hashed")


if __name__ == "__main__":
    asyncio.run(main())
