"""Replay cost of a code agent's step (providers/codejs.py) at 1, 10 and 100 recorded tool calls:
one provider call = a fresh QuickJS context, `run(input)` from the start, every recorded call
answered from the transcript, stopped at the frontier. No database: this is the provider's own
cost, what a step adds over a model call. `python scripts/bench_code_agent.py [--repeat N]`."""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

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


if __name__ == "__main__":
    asyncio.run(main())
